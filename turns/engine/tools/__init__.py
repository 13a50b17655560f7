"""Tools: definitions, registry, argument repair, executor, envelope and builtins (spec 000).

See README.md in this folder for how the turn engine uses it.
"""

from turns.engine.tools.context import (
    CancelToken,
    CallContext,
    CharacterRecord,
    DatasetDeclaration,
    EventTopic,
    InMemoryStateView,
    LorebookEntry,
    MemoryMessage,
    SearchableRecord,
    StateView,
    ToolContext,
    WorldDimension,
)
from turns.engine.tools.definition import Tool, ToolAnnotations, ToolResult, tool
from turns.engine.tools.errors import TOOL_ERROR_CODES, ToolDefinitionError, ToolError, ToolRegistrationError
from turns.engine.tools.executor import ApprovalRule, ToolCall, ToolCallOutcome, ToolExecutor
from turns.engine.tools.proposals import PROPOSAL_KINDS, Proposal, ProposalInvalid, proposal_validate
from turns.engine.tools.builtin import default_registry
from turns.engine.tools.registry import FRAMEWORK_TOOL_NAMES, ToolRegistry

__all__ = [
    "ApprovalRule",
    "CallContext",
    "CancelToken",
    "CharacterRecord",
    "DatasetDeclaration",
    "EventTopic",
    "FRAMEWORK_TOOL_NAMES",
    "InMemoryStateView",
    "LorebookEntry",
    "MemoryMessage",
    "PROPOSAL_KINDS",
    "Proposal",
    "ProposalInvalid",
    "SearchableRecord",
    "StateView",
    "TOOL_ERROR_CODES",
    "Tool",
    "ToolAnnotations",
    "ToolCall",
    "ToolCallOutcome",
    "ToolContext",
    "ToolDefinitionError",
    "ToolError",
    "ToolExecutor",
    "ToolRegistrationError",
    "ToolRegistry",
    "ToolResult",
    "WorldDimension",
    "default_registry",
    "proposal_validate",
    "tool",
]
