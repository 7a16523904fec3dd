"""One configuration mechanism for both programs: a YAML file, `COLO_*` environment variables and flags,
merged in that order of increasing precedence and validated by a pydantic model.

Every value remembers where it came from, so a bad one is reported as the user wrote it: the flag
(`--interval`), the variable (`COLO_INTERVAL`) or the file's key (`config file a.yaml: interval`). The file
may be the plain YAML or a Kubernetes ConfigMap holding it (the manifests' form), so
`--config deploy/daemonset/agent-config.yaml --check` reads the shipped file as it is.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import AfterValidator, BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)

#: Kubernetes' service links (`<SERVICE>_SERVICE_HOST`, `<SERVICE>_PORT_9817_TCP`...): a Service named
#: colo-agent injects COLO_AGENT_*; those variables are not settings.
_SERVICE_LINK = re.compile(r".*_(SERVICE_HOST|SERVICE_PORT(_.+)?|PORT(_\d+_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?)?)$")


def _absolute(path: str) -> str:
    if not path.startswith("/"):
        raise ValueError("must start with '/'")
    return path


#: A setting that is the path part of a URL (`/api/v1/node`).
UrlPath = Annotated[str, AfterValidator(_absolute)]


class ConfigError(Exception):
    """A bad setting: the message names the flag, variable or key, on one line (exit code 2)."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that names a key twice (PyYAML keeps the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the base class reports it
                break
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {first})", key_node.start_mark
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def yaml_problem(err: yaml.YAMLError) -> str:
    """A YAML error in plain words with its line and column: `line 3, column 7: duplicate key 'a'`."""
    if isinstance(err, yaml.MarkedYAMLError) and err.problem_mark is not None:
        mark = err.problem_mark
        what = " ".join(str(err.problem or "invalid").split())
        context = f" ({' '.join(err.context.split())})" if err.context else ""
        return f"line {mark.line + 1}, column {mark.column + 1}: {what}{context}"
    return _one_line(err)


def parse_yaml(text: str, source: str) -> Any:
    """The document in `text`; ConfigError `<source>: not valid YAML: line L, column C: <problem>`."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as err:
        raise ConfigError(f"{source}: not valid YAML: {yaml_problem(err)}") from None


def loc_to_path(loc: Sequence[int | str], prefix: str = "") -> str:
    """A pydantic error location as users write YAML keys: `a.b[2].c`."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out = f"{out}.{part}" if out else str(part)
    return out or "<root>"


def env_name(prefix: str, key: str) -> str:
    """The variable of a dotted key: `enforcement.cpu_policy` -> `COLO_ENFORCEMENT__CPU_POLICY`."""
    return prefix + key.replace(".", "__").upper()


@dataclass(slots=True)
class Layers:
    """The merged document and, per dotted key, where its value came from."""

    data: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)

    def put(self, dotted: Sequence[str], value: Any, origin: str) -> None:
        target = self.data
        for i, part in enumerate(dotted[:-1]):
            nxt = target.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"{origin}: {'.'.join(dotted[: i + 1])} is not a section")
            target = nxt
        target[dotted[-1]] = value
        self.origins[".".join(dotted)] = origin

    def add(self, doc: Mapping[str, Any], origin: str, path: tuple[str, ...] = ()) -> None:
        """Merge a (nested) document; sections merge, everything else replaces."""
        for key, value in doc.items():
            dotted = (*path, str(key))
            if isinstance(value, Mapping) and value:
                self.add(value, origin, dotted)
            else:
                self.put(dotted, value, origin)

    def origin_of(self, key: str) -> str | None:
        """The origin of `key` or of the nearest section it lies in that has one; for a section (a misspelt
        `enforcement.cpu_brust:` holding keys), the one origin of every value under it, if they share it."""
        section = key
        while section:
            if section in self.origins:
                return self.origins[section]
            section = section.rpartition(".")[0]
        below = {origin for name, origin in self.origins.items() if name.startswith(f"{key}.")}
        return below.pop() if len(below) == 1 else None


def unwrap_configmap(doc: dict[str, Any], source: str, data_key: str) -> dict[str, Any]:
    """A ConfigMap's `data[data_key]` (or its only entry), parsed: the manifests keep the config in one."""
    data = doc.get("data")
    if not isinstance(data, Mapping) or not data:
        raise ConfigError(f"{source}: a ConfigMap without data")
    key = data_key if data_key in data else next(iter(data)) if len(data) == 1 else None
    if key is None:
        raise ConfigError(f"{source}: ConfigMap has no {data_key!r} entry (it has {', '.join(map(str, data))})")
    inner = parse_yaml(str(data[key]), f"{source}: data.{key}") or {}
    if not isinstance(inner, dict):
        raise ConfigError(f"{source}: data.{key}: the top level must be a mapping of keys")
    return inner


def read_file(path: str, *, data_key: str = "config.yaml") -> dict[str, Any]:
    """The YAML mapping in `path`, unwrapped when the file is a ConfigMap; ConfigError on any problem."""
    return read_file_kind(path, data_key=data_key)[0]


def is_configmap(doc: object) -> bool:
    """A ConfigMap manifest: `kind: ConfigMap` (with or without `apiVersion`, which kubectl would ask for but
    the reader does not need); neither program has a `kind` setting, so a plain config is never mistaken."""
    return isinstance(doc, dict) and doc.get("kind") == "ConfigMap"


def read_file_kind(path: str, *, data_key: str = "config.yaml") -> tuple[dict[str, Any], bool]:
    """(the mapping, whether the file was a ConfigMap holding it)."""
    source = f"config file {path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"{source}: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{source}: not UTF-8 text: byte {err.start} cannot be decoded") from None
    loaded = parse_yaml(text, source)
    if loaded is None:
        return {}, False
    if not isinstance(loaded, dict):
        raise ConfigError(f"{source}: <root>: the top level must be a mapping of keys")
    if is_configmap(loaded):
        return unwrap_configmap(loaded, source, data_key), True
    return loaded, False


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        for arg in typing.get_args(annotation):
            found = _model_of(arg)
            if found is not None:
                return found
    return None


def names_a_field(model: type[BaseModel], dotted: Sequence[str]) -> bool:
    """Does `a.b.c` name a field (or section) of `model`?"""
    current: type[BaseModel] | None = model
    for part in dotted:
        if current is None or part not in current.model_fields:
            return False
        current = _model_of(current.model_fields[part].annotation)
    return True


def env_value(name: str, value: str) -> Any:
    """Plain strings stay strings (pydantic converts numbers and booleans); `[a, b]` and `{k: v}` are YAML."""
    if value[:1] in ("[", "{"):
        return parse_yaml(value, f"{name}: not a YAML list or mapping")
    return value


def add_environment(
    layers: Layers,
    env: Mapping[str, str],
    prefix: str,
    model: type[BaseModel],
    *,
    skip: Sequence[str] = (),
) -> None:
    """Every `<prefix><KEY>` variable (nested keys joined by `__`), except the names in `skip`, variables
    starting with a `skip` entry that ends in `_`, and service links that name no setting."""
    for name in sorted(env):
        if not name.startswith(prefix) or any(name == s or (s.endswith("_") and name.startswith(s)) for s in skip):
            continue
        dotted = name[len(prefix) :].lower().split("__")
        if not names_a_field(model, dotted) and _SERVICE_LINK.match(name):
            continue
        layers.put(dotted, env_value(name, env[name]), name)


def validate(model: type[M], layers: Layers, *, file_source: str | None = None) -> M:
    """The validated model; ConfigError naming, per problem, where the value came from and its key."""
    try:
        return model.model_validate(layers.data)
    except ValidationError as err:
        raise ConfigError(describe(err, layers, file_source)) from None


def describe(err: ValidationError, layers: Layers, file_source: str | None = None) -> str:
    """`COLO_INTERVAL (interval): Input should be ... (got '0')`, one clause per problem, `; `-joined."""
    parts = []
    for e in err.errors():
        key = loc_to_path(e["loc"])
        msg = str(e.get("msg", "invalid")).removeprefix("Value error, ")
        if e.get("type") == "extra_forbidden":
            msg = "unknown key"
        origin = layers.origin_of(key) if e["loc"] else None
        if origin is None or origin == "file":
            where = f"{file_source}: {key}" if origin == "file" and file_source else key
        else:
            where = f"{origin} ({key})"
        got = f" (got {e['input']!r})" if "input" in e and not isinstance(e["input"], dict) else ""
        parts.append(f"{where}: {msg}{got}")
    return "; ".join(parts)


def load(
    model: type[M],
    *,
    path: str | None,
    env: Mapping[str, str],
    env_prefix: str,
    flags: Mapping[str, tuple[str, Any]],
    env_skip: Sequence[str] = (),
    below_file: Mapping[str, tuple[str, Any]] | None = None,
    file_hook: typing.Callable[[dict[str, Any], bool], None] | None = None,
) -> M:
    """`below_file`, file, environment, then flags (`key: (flag, value)`, None values ignored), validated."""
    layers = Layers()
    for key, (origin, value) in (below_file or {}).items():
        layers.put(key.split("."), value, origin)
    file_source = None
    if path:
        file_source = f"config file {path}"
        doc, configmap = read_file_kind(path)
        if file_hook is not None:
            file_hook(doc, configmap)
        layers.add(doc, "file")
    add_environment(layers, env, env_prefix, model, skip=env_skip)
    for key, (flag, value) in flags.items():
        if value is not None:
            layers.put(key.split("."), value, flag)
    return validate(model, layers, file_source=file_source)


def origin(key: str, flag: str, flag_value: object, env: Mapping[str, str], env_prefix: str, path: str | None) -> str:
    """Where the value of `key` came from, for a message about it: the flag, the variable, the file or
    the default (the same precedence as `load`)."""
    if flag_value is not None:
        return flag
    variable = env_name(env_prefix, key)
    if variable in env:
        return variable
    if path:
        try:
            doc = read_file(path)
        except ConfigError:
            doc = {}
        if key in doc:
            return f"config file {path}: {key}"
    return f"{flag} (default)"
