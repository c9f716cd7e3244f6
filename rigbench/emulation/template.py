"""Read template.yaml and resolve its intrinsic functions against an emulated account.

Only what the emulation needs: parameters with defaults, conditions, Ref, Fn::Sub, Fn::GetAtt,
Fn::Join, Fn::If, Fn::Not, Fn::Equals, Fn::Split and the pseudo parameters.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cfn_tools import load_yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_PATH = REPO_ROOT / "template.yaml"
NO_VALUE = object()


class TemplateError(Exception):
    """The template uses something the emulation cannot resolve."""


@dataclass
class Template:
    path: Path
    body: dict[str, Any]

    @classmethod
    def load(cls, path: Path = TEMPLATE_PATH) -> "Template":
        return cls(path=path, body=load_yaml(path.read_text()))

    @property
    def resources(self) -> dict[str, dict[str, Any]]:
        return dict(self.body["Resources"])

    def of_type(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.resources.items() if v["Type"] == resource_type}

    @property
    def function_globals(self) -> dict[str, Any]:
        return dict(self.body.get("Globals", {}).get("Function", {}))

    def parameter_defaults(self) -> dict[str, Any]:
        return {
            name: spec["Default"]
            for name, spec in self.body.get("Parameters", {}).items()
            if "Default" in spec
        }


@dataclass
class Resolver:
    """Resolves intrinsics: `refs` maps a logical id to its Ref, `attrs` (id, attr) to GetAtt."""

    template: Template
    parameters: dict[str, Any]
    pseudo: dict[str, str]
    refs: dict[str, Any] = field(default_factory=dict)
    attrs: dict[tuple[str, str], Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        declared = self.template.body.get("Parameters", {})
        values = {**self.template.parameter_defaults(), **self.parameters}
        missing = [name for name in declared if name not in values]
        if missing:
            raise TemplateError(f"template parameters without a value: {', '.join(missing)}")
        for name, spec in declared.items():
            value = values[name]
            is_list = spec["Type"].startswith("List<") or spec["Type"] == "CommaDelimitedList"
            if is_list and isinstance(value, str):
                value = [v.strip() for v in value.split(",") if v.strip()]
            values[name] = value
        self.parameters = values
        self.conditions = {
            name: bool(self.resolve(expr))
            for name, expr in self.template.body.get("Conditions", {}).items()
        }

    def ref(self, name: str) -> Any:
        if name in self.pseudo:
            return self.pseudo[name]
        if name in self.parameters:
            return self.parameters[name]
        if name in self.refs:
            return self.refs[name]
        raise TemplateError(f"Ref {name!r} is not resolvable yet")

    def get_att(self, name: str, attr: str) -> Any:
        if (name, attr) not in self.attrs:
            raise TemplateError(f"Fn::GetAtt {name}.{attr} is not resolvable yet")
        return self.attrs[(name, attr)]

    def _sub(self, text: str, extra: dict[str, Any]) -> str:
        def replace(match: re.Match[str]) -> str:
            token = match.group(1)
            if token.startswith("!"):
                return "${" + token[1:] + "}"
            if token in extra:
                return str(extra[token])
            if "." in token and not token.startswith("AWS::"):
                name, attr = token.split(".", 1)
                return str(self.get_att(name, attr))
            return str(self.ref(token))

        return re.sub(r"\$\{([^}]+)\}", replace, text)

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [v for v in (self.resolve(v) for v in value) if v is not NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            handler = self._functions().get(key)
            if handler is not None:
                return handler(arg)
        return {
            k: r for k, r in ((k, self.resolve(v)) for k, v in value.items()) if r is not NO_VALUE
        }

    def _functions(self) -> dict[str, Callable[[Any], Any]]:
        return {
            "Ref": lambda a: NO_VALUE if a == "AWS::NoValue" else self.ref(a),
            "Fn::Sub": self._fn_sub,
            "Fn::GetAtt": self._fn_get_att,
            "Fn::Join": lambda a: str(a[0]).join(str(x) for x in self.resolve(a[1])),
            "Fn::Split": lambda a: str(self.resolve(a[1])).split(a[0]),
            "Fn::If": lambda a: self.resolve(a[1] if self.conditions[a[0]] else a[2]),
            "Fn::Not": lambda a: not self.resolve(a[0]),
            "Fn::Equals": lambda a: self.resolve(a[0]) == self.resolve(a[1]),
            "Condition": lambda a: self.conditions[a],
        }

    def _fn_sub(self, arg: Any) -> str:
        if isinstance(arg, list):
            text, variables = arg
            return self._sub(text, {k: self.resolve(v) for k, v in variables.items()})
        return self._sub(arg, {})

    def _fn_get_att(self, arg: Any) -> Any:
        name, attr = arg if isinstance(arg, list) else arg.split(".", 1)
        return self.get_att(name, attr)
