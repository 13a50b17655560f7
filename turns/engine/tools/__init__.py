"""Tools: the registry, executor, envelope and builtin tools of the turn engine (spec 000). Tool
definitions, errors, proposals and state records are the plugin toolkit's (plugins_app.toolkit);
they are re-exported here because engine code and its tests name them together.

See README.md in this folder for how the turn engine uses it.
"""

from plugins_app.toolkit.definition import Tool, ToolAnnotations, ToolResult, tool
from plugins_app.toolkit.errors import TOOL_ERROR_CODES, ToolDefinitionError, ToolError, ToolRegistrationError
from plugins_app.toolkit.proposals import PROPOSAL_KINDS, Proposal, ProposalInvalid, proposal_validate
from plugins_app.toolkit.state import (
    CharacterRecord,
    DatasetDeclaration,
    EventTopic,
    LorebookEntry,
    MemoryMessage,
    SearchableRecord,
    StateView,
    WorldDimension,
)
from turns.engine.tools.builtin import default_registry
from turns.engine.tools.context import CallContext, CancelToken, InMemoryStateView, ToolContext
from turns.engine.tools.executor import ApprovalRule, ToolCall, ToolCallOutcome, ToolExecutor
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
