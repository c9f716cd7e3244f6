"""A rig's serve settings as its rig.toml declares them: type, bounds and default, one place.

    [serve.settings]
    max_batch = { type = "int", default = 32, min = 1, max = 1024 }
    batching = { type = "str", default = "continuous", choices = ["serial", "continuous"] }
    max_slots = { type = "int", default = "auto", min = 1, words = ["auto"] }

Three readers share the declaration: Validate checks a sweep's values before anything is
reserved (`check_values`), the launcher fills in the defaults, and the rig's own server takes
its command-line defaults and checks from it (`add_options`), so no default is written twice.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

Scalar = str | int | float | bool


class SettingError(ValueError):
    """A setting value its declaration refuses; the message names the key and the value."""


class SettingSpec(BaseModel):
    """One declared setting. `words` are values taken as they are besides the type ("auto");
    a text setting names its `choices` or a `pattern`, as its value reaches a command line."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["int", "float", "str"]
    default: Scalar
    min: float | None = None
    max: float | None = None
    choices: list[str] | None = None
    pattern: str | None = None
    words: list[str] = Field(default_factory=list)
    help: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> SettingSpec:
        if self.type == "str" and not (self.choices or self.pattern):
            raise ValueError("a str setting names its choices or a pattern")
        if self.type != "str" and (self.choices or self.pattern):
            raise ValueError("choices and pattern are for str settings (int and float: min, max)")
        if self.type == "str" and (self.min is not None or self.max is not None):
            raise ValueError("min and max are for int and float settings")
        return self

    def annotation(self) -> Any:
        """The pydantic type of a value (strict: "32" is not an int, 1.5 is not one either)."""
        base: Any
        if self.type == "str":
            base = (
                Literal[tuple(self.choices)]
                if self.choices
                else Annotated[str, Field(pattern=self.pattern)]
            )
        else:
            number = int if self.type == "int" else float
            base = Annotated[number, Field(ge=self.min, le=self.max)]
        return base | Literal[tuple(self.words)] if self.words else base

    def describe(self) -> str:
        """What a value must be, in words: "an int from 1 to 1024, or 'auto'"."""
        if self.choices:
            text = "one of " + ", ".join(map(repr, self.choices))
        elif self.type == "str":
            text = f"text matching {self.pattern}"
        else:
            text = f"an {self.type}" if self.type == "int" else f"a {self.type}"
            if self.min is not None and self.max is not None:
                text += f" from {self.min:g} to {self.max:g}"
            elif self.min is not None:
                text += f" of at least {self.min:g}"
            elif self.max is not None:
                text += f" of at most {self.max:g}"
        return text + "".join(f", or {word!r}" for word in self.words)

    def from_text(self, text: str) -> Scalar:
        """A value given on a command line, as its type (text that is not a number stays text,
        for the check to refuse by name)."""
        if text in self.words or self.type == "str":
            return text
        try:
            return int(text) if self.type == "int" else float(text)
        except ValueError:
            return text


def settings_model(rig: str, specs: Mapping[str, SettingSpec]) -> type[BaseModel]:
    """The rig's settings as one strict pydantic model, every field defaulting to its spec."""
    fields: dict[str, Any] = {key: (spec.annotation(), spec.default) for key, spec in specs.items()}
    config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
    return create_model(f"{rig}_settings", __config__=config, **fields)


def check_values(rig: str, specs: Mapping[str, SettingSpec], values: Mapping[str, Scalar]) -> None:
    """SettingError naming rig, key and value for each value its declaration refuses."""
    try:
        settings_model(rig, specs).model_validate(dict(values))
    except ValidationError as err:
        keys = sorted({str(problem["loc"][0]) for problem in err.errors() if problem["loc"]})
        raise SettingError(
            "; ".join(
                f"rig {rig} setting {key} = {values[key]!r} is not {specs[key].describe()}"
                for key in keys
            )
        ) from None


def add_options(
    parser: argparse.ArgumentParser,
    rig: str,
    specs: Mapping[str, SettingSpec],
    converters: Mapping[str, Callable[[str], Any]] | None = None,
) -> None:
    """One `--key-name` option per declared setting, its default the declared one. A value is
    checked against its declaration, then given to its converter when one is named (the
    server's own form: `--max-slots auto` as 0, ...)."""
    for key, spec in specs.items():
        convert = (converters or {}).get(key)
        parser.add_argument(
            f"--{key.replace('_', '-')}",
            dest=key,
            type=_option_type(rig, key, spec, convert),
            default=spec.default if convert is None else str(spec.default),
            help=spec.help or None,
        )


def _option_type(
    rig: str, key: str, spec: SettingSpec, convert: Callable[[str], Any] | None
) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        value = spec.from_text(text)
        try:
            check_values(rig, {key: spec}, {key: value})
        except SettingError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
        return value if convert is None else convert(text)

    parse.__name__ = spec.type  # argparse names the type in its own errors
    return parse
