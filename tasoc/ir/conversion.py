"""Ops that give one tensor another type: one operand, one result of the same shape and
element type, laid out (`parallel`) or placed (`memory`) otherwise.

Such an op is written with its result type only, `%r = dialect.op %x attr-dict : type`:
the operand's type is its definition's, as in the `graph` dialect's short form, so a
program reads as a chain of layouts or places. `ConversionOp` is the text form and the
two fields the collectives and the swaps share; each dialect subclasses it and says
what its op may change.
"""

from __future__ import annotations

from typing import Self

from xdsl.dialects.builtin import TensorType
from xdsl.irdl import IRDLOperation, operand_def, result_def
from xdsl.parser import Parser
from xdsl.printer import Printer

from tasoc.ir.graph import defined_value


class ConversionOp(IRDLOperation):
    """One tensor in, the same tensor in another type out (module docstring)."""

    input = operand_def(TensorType)
    output = result_def(TensorType)

    @classmethod
    def parse(cls, parser: Parser) -> Self:
        operand = parser.parse_unresolved_operand()
        attributes = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        result_type = parser.parse_type()
        return cls.create(
            operands=[defined_value(parser, operand)],
            result_types=[result_type],
            attributes=attributes,
        )

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.input)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.output.type)
