"""Errors of the formula language, each naming the column of the problem."""

from __future__ import annotations

from ..errors import TraceError

__all__ = ["FormulaError", "FormulaSyntaxError", "FormulaConstraintError"]


class FormulaError(TraceError):
    """A formula that cannot be used. ``column``/``line`` are 1-based; None when unknown."""

    def __init__(self, message: str, *, column: int | None = None, line: int | None = None) -> None:
        self.message = message
        self.column = column
        self.line = line
        super().__init__(self._render())

    def _render(self) -> str:
        if self.column is None:
            return self.message
        where = f"formula column {self.column}"
        if self.line and self.line > 1:
            where = f"formula line {self.line}, column {self.column}"
        return f"{where}: {self.message}"


class FormulaSyntaxError(FormulaError):
    """The text is not a formula (bad character, misplaced token, unknown symbol)."""


class FormulaConstraintError(FormulaError):
    """The formula parses but breaks a rule of the language (nesting, where a term may act)."""
