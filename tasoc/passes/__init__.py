"""Compiler passes of tasoc (xDSL ModulePasses), one sub-package per optimizer."""
