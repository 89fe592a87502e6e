"""config/scoring.yml: the eligibility and output rules (lakescore.rules) and the eligibility mode."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationInfo

from lakescore.config.base import FIXED_OUTPUTS, StrictModel
from lakescore.usercode import refuse_former_package

# a module or module:function reference to the project's code (not by the package's former name)
CodeRef = Annotated[str, AfterValidator(refuse_former_package)]

# mode: which rows scoring refuses: the eligibility rules, the pre-split recipe's row filters, or both
EligibilityMode = Literal["rules", "pre_split", "combined"]


class RuleConfig(StrictModel):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    function: CodeRef
    columns: list[str] = Field(min_length=1)
    version: int = 1
    params: dict[str, Any] = Field(default_factory=dict)


OutputType = Literal["string", "double", "long", "boolean"]


class OutputRuleConfig(StrictModel):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    function: CodeRef
    columns: list[str] = Field(default_factory=list)
    outputs: dict[str, OutputType] = Field(min_length=1)
    version: int = 1
    params: dict[str, Any] = Field(default_factory=dict)


def _output_names(rules: list[OutputRuleConfig]) -> list[OutputRuleConfig]:
    seen: set[str] = set()
    for rule in rules:
        for name in rule.outputs:
            if name in FIXED_OUTPUTS or name in seen or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
                raise ValueError(f"output column {name!r} of rule {rule.name!r} must be a new name (letters, "
                                 f"digits, _), not repeated and not one of {', '.join(FIXED_OUTPUTS)}")
            seen.add(name)
    return rules


def _mode_allows(mode: EligibilityMode, info: ValidationInfo) -> EligibilityMode:
    if mode == "pre_split" and info.data.get("eligibility"):
        raise ValueError("with mode 'pre_split' eligibility comes from the pre-split recipe only, but "
                         "eligibility rules are listed; use mode 'combined' to keep both")
    return mode


class ScoringConfig(StrictModel):
    """config/scoring.yml: eligibility rules, how pre-split filters are re-used, output rules."""

    module: CodeRef = "lakescore_project.scoring"
    eligibility: list[RuleConfig] = Field(default_factory=list)
    # rules: only the eligibility rules; pre_split: the pre-split recipe's row filters re-applied as
    # eligibility; combined: both (the default: with no pre_split recipe it is the same as rules)
    mode: Annotated[EligibilityMode, AfterValidator(_mode_allows)] = "combined"
    skip_target_pre_split_steps: bool = True
    output: Annotated[list[OutputRuleConfig], AfterValidator(_output_names)] = Field(default_factory=list)
    # a model set's rules over one row's component outputs (<component>_<column>) and inputs
    combined_rules: Annotated[list[OutputRuleConfig], AfterValidator(_output_names)] = Field(default_factory=list)
