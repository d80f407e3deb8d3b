"""The ``trace`` command: a thin shell over library functions, one module per subcommand.

Exit statuses: 0 done; 2 bad input (every user error is a :class:`tracebench.errors.TraceError`,
printed as one line on stderr, without a traceback); 3 done, but some model calls gave no usable
answer (the count, the main reasons and the command that asks again on one stderr line);
130 interrupted (Ctrl-C: nothing half-written, the same command resumes). A full or read-only
disk is one line and status 2 as well (nothing half-written; ``trace run`` resumes).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Sequence

from .. import __version__
from ..errors import TraceError, ValidationFailed, disk_full
from ._args import EXIT_STATUSES
from . import agree as agree_cmd
from . import compare as compare_cmd
from . import diagnose as diagnose_cmd
from . import export as export_cmd
from . import import_ as import_cmd
from . import import_lmms as import_lmms_cmd
from . import leaderboard as leaderboard_cmd
from . import library as library_cmd
from . import merge as merge_cmd
from . import parse as parse_cmd
from . import rejudge as rejudge_cmd
from . import report as report_cmd
from . import run as run_cmd
from . import sample as sample_cmd
from . import score as score_cmd
from . import serve as serve_cmd
from . import tag as tag_cmd
from . import templates as templates_cmd

__all__ = ["main", "build_parser"]

_SUBCOMMANDS = (sample_cmd, run_cmd, rejudge_cmd, score_cmd, compare_cmd, leaderboard_cmd, diagnose_cmd, report_cmd, agree_cmd, merge_cmd, export_cmd,
               import_cmd, import_lmms_cmd, serve_cmd, parse_cmd, templates_cmd, library_cmd, tag_cmd)


class _OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="trace", description="Build, run and diagnose TRACE-Bench-style benchmarks.",
        epilog=EXIT_STATUSES)
    parser.add_argument("--version", action="version", version=f"tracebench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_OneLineParser)
    for module in _SUBCOMMANDS:
        module.register(sub)
    _remember_parsers(parser)
    return parser


def _remember_parsers(parser: argparse.ArgumentParser) -> None:
    """Each (sub)command's parser as the default ``_parser``: an unknown option is reported by the
    subcommand it was given to (``trace score: unrecognized arguments``)."""
    parser.set_defaults(_parser=parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _remember_parsers(child)


def _check_out(option: str, path: Path) -> None:
    """An output path whose nearest existing ancestor is a file, or a folder that cannot be
    written, is a one-line error before anything runs."""
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise TraceError(f"{option} {path}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise TraceError(f"{option} {path}: cannot write in {parent} (permission denied)")


def _command_name(args) -> str:
    action = getattr(args, "action", None)
    return f"trace {args.command}" + (f" {action}" if action else "")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
    except TraceError as err:  # a data file read to declare an option (a default checked against it)
        print(f"trace: {err}", file=sys.stderr)
        return 2
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        args._parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        from ..images import max_image_pixels

        max_image_pixels()  # a TRACEBENCH_MAX_IMAGE_PIXELS that is no number: one line before anything is done
        for option in ("out", "export_nodes", "lmms_eval"):
            if isinstance(getattr(args, option, None), Path):
                _check_out(f"--{option.replace('_', '-')}", getattr(args, option))
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        print(f"{_command_name(args)}: interrupted; run the same command to resume", file=sys.stderr)
        return 130
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
    except OSError as err:  # a full or read-only disk: outputs are staged or atomic, nothing is half-written
        problem = disk_full(err, "free some space and run the same command again", where=getattr(args, "out", None))
        if problem is None:
            raise
        print(f"{_command_name(args)}: {problem}", file=sys.stderr)
        return 2
