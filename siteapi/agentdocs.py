"""The discovery documents built from the MCP tool registry, so they list exactly what /mcp serves:
the A2A agent card (`/.well-known/agent-card.json`, discovery only: no task endpoint) and the agent
skills index (`/.well-known/agent-skills/index.json`) with one SKILL.md per tool.
"""
from __future__ import annotations

import hashlib
import json
import re

from siteapi.mcp_tools import Tool

# The Agent Skills format's limit on a skill's description; an A2A card's skills set none, and
# carry the same text.
DESCRIPTION_CHARS = 1024
_SENTENCE_END = re.compile(r"[.!?](?=\s)")


def skill_name(tool: Tool) -> str:
    """The Agent Skills name of a tool's skill: lowercase letters, digits and hyphens, as that
    specification asks of a skill's name and folder (MCP tool names have underscores)."""
    return tool.name.replace("_", "-")


def brief(tool: Tool) -> str:
    """The tool's description for choosing among skills: whole when it fits DESCRIPTION_CHARS, else
    up to the last sentence that ends within it (a word, when none does). It opens with the summary
    and the tool's own note (mcp_tools.describe), so tools of one operation stay apart."""
    text = " ".join(tool.description.split())
    if len(text) <= DESCRIPTION_CHARS:
        return text
    ends = [m.end() for m in _SENTENCE_END.finditer(text, 0, DESCRIPTION_CHARS)]
    return text[:ends[-1]] if ends else text[:DESCRIPTION_CHARS - 1].rsplit(" ", 1)[0] + "…"


def skill_markdown(settings, tool: Tool) -> str:
    """SKILL.md: front matter (name, description) and how to call the tool over MCP."""
    params = tool.input_schema.get("properties", {})
    required = set(tool.input_schema.get("required", []))
    lines = ["---", f"name: {skill_name(tool)}", f"description: {json.dumps(brief(tool))}", "---",
             "", f"# {tool.title}", "", tool.description, "",
             f"Call it as the MCP tool `{tool.name}` at {settings.url('/mcp')} (Streamable HTTP, no key).", ""]
    if params:
        lines += ["| Argument | Required | Description |", "|---|---|---|"]
        lines += [f"| `{name}` | {'yes' if name in required else 'no'} | "
                  f"{' '.join(str(spec.get('description', spec.get('type', ''))).split())} |"
                  for name, spec in params.items()]
        lines.append("")
    lines.append(f"The same capability over plain HTTP is `{tool.endpoint}`, described in {settings.url('/openapi.json')}."
                 if tool.endpoint else "This tool is served over MCP only; no HTTP endpoint does the same.")
    return "\n".join(lines) + "\n"


def skills_index(settings, tools: dict[str, Tool]) -> dict:
    skills = []
    for tool in tools.values():
        text = skill_markdown(settings, tool)
        skills.append({"name": skill_name(tool), "type": "skill-md", "description": brief(tool),
                       "url": settings.url(f"/.well-known/agent-skills/{skill_name(tool)}/SKILL.md"),
                       "sha256": hashlib.sha256(text.encode()).hexdigest()})
    return {"skills": skills}


def agent_card(settings, tools: dict[str, Tool], version: str) -> dict:
    """A2A agent card (protocol 0.3) for discovery only: who this is and its one interface, MCP at
    /mcp, named as such so no A2A client takes it for A2A's JSON-RPC; skills mirror the tools."""
    return {
        "protocolVersion": "0.3.0",
        "name": settings.site_name,
        "description": "The public API of a personal site as tools (read-only but for two that store snapshots): site search and questions, a photo "
                       "archive with film recipes, a URL inspector for how machines see a page, and live feeds. "
                       "Discovery only: the tools are served over MCP (Streamable HTTP) at /mcp, not over A2A.",
        "url": settings.url("/mcp"),
        "preferredTransport": "MCP",
        "additionalInterfaces": [{"url": settings.url("/mcp"), "transport": "MCP"}],
        "version": version,
        "documentationUrl": settings.url("/developers"),
        "provider": {"organization": settings.site_name, "url": settings.url("/")},
        "capabilities": {"streaming": False, "pushNotifications": False},
        "defaultInputModes": ["application/json"],
        "defaultOutputModes": ["application/json"],
        "securitySchemes": {},
        "skills": [{"id": t.name, "name": t.title, "description": brief(t),
                    "tags": ["read-only"] if t.read_only else ["stores-snapshot"]} for t in tools.values()],
    }
