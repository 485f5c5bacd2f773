"""Command-line flags generated from the settings' fields: one source for a flag's name, type, default and
help (the field of :class:`~promptevo.optim.config.OptimizeConfig`), grouped by the settings' sections.

A command is a list of :class:`Flag` and a body that takes the values the user gave (flags left out are
absent, never defaulted here: the config's defaults and presets apply later, once). :func:`make_command`
turns them into a typer command; :func:`parse` reads arguments with the same command without running it
(the ``cli_main(args)`` entry points and the tests)."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Optional

import typer

from promptevo.cli.errors import UsageError, print_error, user_error_types
from promptevo.optim.config import SECTION_TITLES, SECTIONS, OptimizeConfig, flag_of, section_of


@dataclass(frozen=True)
class Flag:
    """One command-line parameter: ``dest`` is the name the body receives (a config field or a
    command's own), ``decls`` its flag names (``--generations``, ``-g``; for a bool ``--race/--no-race``),
    ``kind`` its Python type (``Literal[...]`` gives the choices), ``convert`` turns the typed text into
    the value (a comma list)."""

    dest: str
    decls: tuple[str, ...]
    kind: Any
    help: str
    panel: str
    convert: Callable[[Any], Any] | None = None
    argument: bool = False
    metavar: str | None = None


#: short and extra names of config flags (the long name is :func:`~promptevo.optim.config.flag_of`)
ALIASES: dict[str, tuple[str, ...]] = {
    "task": ("-t",), "agent": ("-a",), "model": ("-m",), "concurrency": ("-j",), "generations": ("-g",),
    "children": ("-k",), "episodes": ("-n",), "fitness": ("--metric",),
}

#: config fields without a flag of their own (``--history`` fills agent_options; the others are set by
#: commands, not typed)
NO_FLAG = ("agent_options", "final_test", "expert_seeds", "resume")


def comma_list(text: str) -> list[str]:
    return [x.strip() for x in str(text).split(",") if x.strip()]


def _base_type(annotation: Any) -> Any:
    """``int | None`` -> int; ``Literal[...] | None`` -> the Literal; ``list[str]`` -> list."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return _base_type(args[0])
    if typing.get_origin(annotation) is list:
        return list
    return annotation


def _with_default(text: str, default: Any) -> str:
    if default is None or "default" in text:
        return text
    if isinstance(default, list):
        default = ",".join(map(str, default))
    return f"{text} (default {default})"


#: "no command-specific default": the field's own
FIELD_DEFAULT = object()


def field_flag(name: str, *, default: Any = FIELD_DEFAULT, also: tuple[str, ...] = (), help: str | None = None,
               panel: str | None = None) -> Flag:
    """The flag of config field ``name``: names from flag_of and ALIASES (and ``also``), type and default
    from the field, help from its description (with its default), panel from its section; a command whose
    use of the setting differs gives its own ``default``, ``help`` or ``panel``."""
    info = OptimizeConfig.model_fields[name]
    kind = _base_type(info.annotation)
    if default is FIELD_DEFAULT:
        default = None if info.is_required() else info.get_default(call_default_factory=True)
    long = flag_of(name)
    convert = None
    if kind is bool:
        positive = "--" + name.replace("_", "-")
        decls: tuple[str, ...] = (f"{positive}/--no-{name.replace('_', '-')}",) if default else (long,)
    else:
        decls = (long, *ALIASES.get(name, ()), *also)
    if kind is list:
        kind, convert = str, comma_list
    text = _with_default(help or info.description or name.replace("_", " "),
                         ("on" if default else None) if kind is bool else default)
    if typing.get_origin(kind) is Literal:
        text += "; one of " + ", ".join(typing.get_args(kind))
    return Flag(name, decls, kind, text, panel or SECTION_TITLES[section_of(name)], convert)


def config_flags(exclude: Sequence[str] = ()) -> list[Flag]:
    """Every config field's flag, section by section (:data:`~promptevo.optim.config.SECTIONS`)."""
    return [field_flag(f) for fields in SECTIONS.values() for f in fields if f not in NO_FLAG and f not in exclude]


def own_flag(dest: str, *decls: str, kind: Any = str, help: str, panel: str, metavar: str | None = None,
             convert: Callable[[Any], Any] | None = None, argument: bool = False) -> Flag:
    """A parameter of one command that is not a config field (``--resume RUN``, ``--quiet``)."""
    return Flag(dest, decls, kind, help, panel, convert, argument, metavar)


#: what the help shows for a value of each type (a closed choice shows its values, a switch nothing)
METAVARS = {int: "INT", float: "NUMBER", str: "TEXT", bool: ""}


def _parameter(flag: Flag) -> inspect.Parameter:
    from rich.markup import escape

    annotation = flag.kind if flag.argument else Optional[flag.kind]
    metavar = flag.metavar if flag.metavar is not None else \
        "CHOICE" if typing.get_origin(flag.kind) is Literal else METAVARS.get(flag.kind)
    if flag.argument:
        info = typer.Argument(..., help=escape(flag.help), metavar=metavar, show_default=False)
    else:
        info = typer.Option(None, *flag.decls, help=escape(flag.help), rich_help_panel=flag.panel, metavar=metavar,
                            show_default=False)
    return inspect.Parameter(flag.dest, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=annotation)


def make_command(flags: Sequence[Flag], body: Callable[[dict[str, Any]], Any], doc: str) -> Callable[..., Any]:
    """A function typer registers as a command: its parameters are ``flags``; it calls ``body`` with the
    values given (converted; flags left out are absent) and returns what the body returns."""
    dests = [f.dest for f in flags]
    if len(set(dests)) != len(dests):
        raise ValueError(f"two flags with one name: {sorted(d for d in dests if dests.count(d) > 1)}")
    converters = {f.dest: f.convert for f in flags if f.convert}

    def command(**values: Any) -> Any:
        given = {k: (converters[k](v) if k in converters else v) for k, v in values.items() if v is not None}
        return body(given)

    params = [_parameter(f) for f in flags]
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__doc__ = doc
    return command


def option_names(flags: Sequence[Flag]) -> list[str]:
    """Every long flag name of ``flags`` (both names of a ``--x/--no-x`` switch)."""
    return [n for f in flags if not f.argument for d in f.decls for n in d.split("/") if n.startswith("--")]


def context_settings(flags: Sequence[Flag]) -> dict[str, Any]:
    """A command's settings: a long flag may be shortened to any prefix that names one flag
    (``--dry`` for ``--dry-run``), as the commands have always accepted."""
    names = [n[2:] for n in option_names(flags)]  # the framework passes a name without its dashes

    def expand(token: str) -> str:
        if token in names:
            return token
        found = [n for n in names if n.startswith(token)]
        return found[0] if len(found) == 1 else token

    return {"token_normalize_func": expand}


def parse(flags: Sequence[Flag], args: Sequence[str], prog: str, doc: str = "") -> dict[str, Any]:
    """The values ``args`` give (as :func:`make_command`'s body receives them), read by the same typer
    command. A usage error is one :class:`UsageError` line naming the flag (and the closest valid one for a
    misspelt flag); ``--help`` prints the help and raises SystemExit(0)."""
    app = typer.Typer(add_completion=False, rich_markup_mode="rich", pretty_exceptions_enable=False)
    app.command(context_settings=context_settings(flags))(make_command(flags, lambda given: given, doc))
    command = typer.main.get_command(app)
    try:
        out = command.main(list(args), prog_name=prog, standalone_mode=False)
    except Exception as e:  # noqa: BLE001 - a usage error of the CLI framework, by its interface
        if not (callable(getattr(e, "format_message", None)) and hasattr(e, "exit_code")):
            raise
        raise UsageError(f"{' '.join(e.format_message().split())} (see `{prog} --help`)") from None
    if not isinstance(out, dict):  # --help was printed
        raise SystemExit(0)
    return out


def run_args(flags: Sequence[Flag], args: Sequence[str], run: Callable[[dict[str, Any]], int], prog: str,
             doc: str = "") -> int:
    """A command's ``cli_main``: ``run`` with the values ``args`` give; a usage error is one line and exit
    code 2, ``--help`` exits 0."""
    try:
        values = parse(flags, args, prog, doc)
    except SystemExit as e:  # --help
        return int(e.code or 0)
    except user_error_types() as e:
        print_error(e)
        return 2
    return run(values)
