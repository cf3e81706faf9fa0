"""Text tool calls as HUD-style configs write them, `<tool>name(arg, key=value)</tool>`, for
models without native tool calling; the config's `action_mappings` turn each action into an MCP
call, and its `parser` and `rubric` sections score the rollout:

    action_mappings:
      left:                      # the action the model writes: <tool>left()</tool>
        _tool: move              # the MCP tool it calls
        _parser: {positional: []}
        direction: {static: left}
      move:                      # <tool>move(up)</tool>
        _tool: move
        _parser: {positional: [direction]}
        direction: {from_arg: direction}
    parser: {use_thinking: false, xml_weight: 0.6, action_weight: 0.4}
    rubric: {weights: {task_completion: 0.8, tool_execution: 0.1, format_compliance: 0.1}}

An action without a mapping calls the MCP tool of its name, positional arguments taking the
tool's parameters in their declared order. Pure Python: `rl init`, `rl --config` and the
environment all use it."""

import ast
import re
from dataclasses import dataclass, field
from typing import Any

TOOL_TAG = re.compile(r"<tool>\s*(.*?)\s*</tool>", re.DOTALL)
THINK_TAG = re.compile(r"<think>.*?</think>", re.DOTALL)
RUBRIC_TERMS = ("task_completion", "tool_execution", "format_compliance")
TEXT_CALL_SYNTAX = (
    "To use a tool, write <tool>NAME(ARGUMENTS)</tool>, e.g. <tool>{example}</tool>; its result "
    "comes back in <tool_response>...</tool_response>. When the task is done, answer without a "
    "tool call."
)


class ActionError(ValueError):
    """A text call that cannot become an MCP call; the message is shown to the model."""


@dataclass
class Workflow:
    """The scoring and action sections of a workflow config (validated by `from_args`)."""

    use_thinking: bool = False
    xml_weight: float = 0.6
    action_weight: float = 0.4
    action_mappings: dict[str, dict[str, Any]] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=lambda: {"task_completion": 1.0})

    @classmethod
    def from_args(cls, parser: dict | None, mappings: dict | None, rubric: dict | None):
        parser, rubric = parser or {}, rubric or {}
        unknown = set(parser) - {"use_thinking", "xml_weight", "action_weight"}
        if unknown:
            raise ValueError(
                f"parser: unknown key(s) {sorted(unknown)}; known: use_thinking, "
                "xml_weight, action_weight"
            )
        weights = dict(rubric.get("weights") or {"task_completion": 1.0})
        bad = sorted(set(weights) - set(RUBRIC_TERMS))
        if bad:
            raise ValueError(f"rubric.weights: unknown term(s) {bad}; known: {list(RUBRIC_TERMS)}")
        for name, mapping in (mappings or {}).items():
            check_mapping(name, mapping)
        return cls(
            use_thinking=bool(parser.get("use_thinking", False)),
            xml_weight=float(parser.get("xml_weight", 0.6)),
            action_weight=float(parser.get("action_weight", 0.4)),
            action_mappings=dict(mappings or {}),
            weights={k: float(v) for k, v in weights.items()},
        )


def check_mapping(name: str, mapping: Any) -> None:
    where = f"action_mappings.{name}"
    if not isinstance(mapping, dict) or not isinstance(mapping.get("_tool"), str):
        raise ValueError(f"{where}: needs `_tool`, the MCP tool the action calls")
    positional = (mapping.get("_parser") or {}).get("positional", [])
    if not isinstance(positional, list):
        raise ValueError(f"{where}._parser.positional: expected a list of argument names")
    for param, spec in mapping.items():
        if param.startswith("_"):
            continue
        if not isinstance(spec, dict) or len({"static", "from_arg"} & set(spec)) != 1:
            raise ValueError(f"{where}.{param}: give exactly one of `static` or `from_arg`")


def parse_call(text: str) -> tuple[str, list[Any], dict[str, Any]]:
    """`name(a, 'b', key=3)` -> (name, positional, keyword); bare words are strings."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise ActionError(f"`{text[:100]}` is not NAME(ARGUMENTS)") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ActionError(f"`{text[:100]}` is not NAME(ARGUMENTS)")
    args = [literal(a) for a in node.args]
    kwargs = {k.arg: literal(k.value) for k in node.keywords if k.arg}
    return node.func.id, args, kwargs


def literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Name):
        return node.id
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise ActionError(f"`{ast.unparse(node)[:60]}` is not a plain value") from None


def to_mcp_call(
    action: str, args: list, kwargs: dict, workflow: Workflow, params: dict[str, list[str]]
) -> tuple[str, dict[str, Any]]:
    """The MCP (tool, arguments) of one action; `params`: each tool's parameter names."""
    mapping = workflow.action_mappings.get(action)
    if mapping is None:
        if action not in params:
            raise ActionError(f"there is no tool `{action}`; tools: {', '.join(sorted(params))}")
        names = params[action]
        if len(args) > len(names):
            raise ActionError(f"`{action}` takes at most {len(names)} argument(s)")
        return action, {**dict(zip(names, args, strict=False)), **kwargs}
    positional = (mapping.get("_parser") or {}).get("positional", [])
    if len(args) > len(positional):
        raise ActionError(f"`{action}` takes {len(positional)} positional argument(s)")
    given = {**dict(zip(positional, args, strict=False)), **kwargs}
    arguments = {}
    for param, spec in mapping.items():
        if param.startswith("_"):
            continue
        if "static" in spec:
            arguments[param] = spec["static"]
        elif spec["from_arg"] in given:
            arguments[param] = given[spec["from_arg"]]
        else:
            raise ActionError(f"`{action}` needs the argument `{spec['from_arg']}`")
    return mapping["_tool"], arguments


def format_score(text: str, workflow: Workflow, valid_action: bool) -> float:
    """One assistant turn's format: a single well-formed <tool> block (after <think>...</think>
    when `use_thinking`) weighs `xml_weight`, an action that maps to a call `action_weight`."""
    blocks = TOOL_TAG.findall(text)
    xml_ok = len(blocks) == 1 and (not workflow.use_thinking or bool(THINK_TAG.search(text)))
    total = workflow.xml_weight + workflow.action_weight
    score = workflow.xml_weight * xml_ok + workflow.action_weight * (xml_ok and valid_action)
    return score / total if total else 0.0


def example_call(tools: list[dict[str, Any]]) -> str:
    if not tools:
        return "NAME()"
    params = list(tools[0].get("parameters", {}).get("properties", {}))
    return f"{tools[0]['name']}({', '.join(params)})"
