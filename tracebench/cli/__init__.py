"""The ``trace`` command: a thin shell over library functions, one module per subcommand.

Every user error is a :class:`tracebench.errors.TraceError`; it is printed as one line on
stderr and the command exits with status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from .. import __version__
from ..errors import TraceError, ValidationFailed
from . import agree as agree_cmd
from . import diagnose as diagnose_cmd
from . import library as library_cmd
from . import merge as merge_cmd
from . import parse as parse_cmd
from . import report as report_cmd
from . import run as run_cmd
from . import sample as sample_cmd
from . import score as score_cmd
from . import serve as serve_cmd
from . import tag as tag_cmd
from . import templates as templates_cmd

__all__ = ["main", "build_parser"]

_SUBCOMMANDS = (sample_cmd, run_cmd, score_cmd, diagnose_cmd, report_cmd, agree_cmd, merge_cmd, serve_cmd, parse_cmd, templates_cmd, library_cmd,
               tag_cmd)


class _OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog="trace", description="Build, run and diagnose TRACE-Bench-style benchmarks.")
    parser.add_argument("--version", action="version", version=f"tracebench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_OneLineParser)
    for module in _SUBCOMMANDS:
        module.register(sub)
    return parser


def _command_name(args) -> str:
    action = getattr(args, "action", None)
    return f"trace {args.command}" + (f" {action}" if action else "")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except ValidationFailed as err:
        for problem in err.problems:
            print(problem, file=sys.stderr)
        print(f"{_command_name(args)}: {err}", file=sys.stderr)
        return 2
    except TraceError as err:
        print(f"{_command_name(args)}: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `trace templates | head`: the reader left, nothing is wrong
        sys.stderr.close()
        return 0
