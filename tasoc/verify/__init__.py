"""Verification: numeric equivalence of programs (`equivalence`), hypothesis
strategies for property-testing passes (`strategies`), and rule proofs."""
