"""GET /api/agent/tools?format=: one definition per action, in each model API's shape, each checked against
the schema subset that API documents (the keyword lists below are written from their documentation, not
taken from the code under test)."""

import re

import jsonschema
import mcp_types
import pytest

from approvals.core.arguments import MAX_SAFE_MINOR, input_json_schema
from refunds.serializers import RefundOrderArguments
from tests.conftest import agent_client_for, propose

# OpenAI function calling, strict mode ("Supported schemas" of Structured Outputs).
OPENAI_STRICT = {
    "type",
    "description",
    "properties",
    "required",
    "additionalProperties",
    "enum",
    "const",
    "anyOf",
    "items",
    "pattern",
    "format",
    "$defs",
    "$ref",
}
OPENAI_STRING_FORMATS = {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
# Gemini function declarations: the Schema object (OpenAPI 3.0 subset).
GEMINI = {
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "maxItems",
    "minItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "anyOf",
    "propertyOrdering",
    "default",
    "items",
    "minimum",
    "maximum",
}
GEMINI_TYPES = {"string", "number", "integer", "boolean", "array", "object"}
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def walk(schema):
    """Every schema node (not the property-name maps)."""
    yield schema
    for name, child in schema.get("properties", {}).items():
        assert isinstance(name, str)
        yield from walk(child)
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"])
    for child in schema.get("anyOf", []):
        yield from walk(child)


def check_openai_strict(parameters):
    assert parameters["type"] == "object"
    for node in walk(parameters):
        assert set(node) <= OPENAI_STRICT, set(node) - OPENAI_STRICT
        if "format" in node:
            assert node["format"] in OPENAI_STRING_FORMATS
        if node.get("type") == "object":
            assert node["additionalProperties"] is False
            assert sorted(node["required"]) == sorted(node["properties"])
    jsonschema.Draft202012Validator.check_schema(parameters)


@pytest.fixture
def agent(alice):
    return agent_client_for(alice, tools=("refund_order",))


def test_the_default_shape_is_the_contracts(agent):
    body = agent.get("/api/agent/tools").json()
    assert body == {
        "tools": [
            {
                "name": "refund_order",
                "description": body["tools"][0]["description"],
                "input_schema": input_json_schema(RefundOrderArguments),
            }
        ]
    }
    assert body["tools"][0]["input_schema"]["properties"]["amount_minor"]["maximum"] == MAX_SAFE_MINOR


def test_openai_chat_completions_strict(agent):
    tools = agent.get("/api/agent/tools?format=openai").json()
    assert [tool["type"] for tool in tools] == ["function"]
    function = tools[0]["function"]
    assert set(function) == {"name", "description", "parameters", "strict"}
    assert function["strict"] is True and TOOL_NAME.match(function["name"])
    check_openai_strict(function["parameters"])
    amount = function["parameters"]["properties"]["amount_minor"]
    assert amount["type"] == "integer"
    assert "maximum" not in amount and "minimum" not in amount and "format" not in amount
    assert f"An integer from 0 to {MAX_SAFE_MINOR}." in amount["description"]
    order_id = function["parameters"]["properties"]["order_id"]
    assert "maxLength" not in order_id and "1 to 64 characters." in order_id["description"]


def test_openai_responses(agent):
    tools = agent.get("/api/agent/tools?format=openai-responses").json()
    assert len(tools) == 1
    assert set(tools[0]) == {"type", "name", "description", "parameters", "strict"}
    assert tools[0]["type"] == "function" and tools[0]["strict"] is True
    check_openai_strict(tools[0]["parameters"])


def test_anthropic(agent):
    tools = agent.get("/api/agent/tools?format=anthropic").json()
    assert len(tools) == 1
    assert set(tools[0]) == {"name", "description", "input_schema"}
    assert TOOL_NAME.match(tools[0]["name"])
    assert tools[0]["input_schema"]["type"] == "object"
    assert tools[0]["input_schema"] == input_json_schema(RefundOrderArguments)
    jsonschema.Draft202012Validator.check_schema(tools[0]["input_schema"])


def test_mcp(agent):
    body = agent.get("/api/agent/tools?format=mcp").json()
    tool = mcp_types.Tool.model_validate(body["tools"][0])
    assert tool.name == "refund_order"
    assert tool.input_schema == input_json_schema(RefundOrderArguments)
    assert tool.annotations.destructive_hint is True and tool.annotations.idempotent_hint is True
    assert tool.annotations.read_only_hint is False
    jsonschema.Draft202012Validator.check_schema(tool.input_schema)


def test_gemini(agent):
    body = agent.get("/api/agent/tools?format=gemini").json()
    assert len(body) == 1 and set(body[0]) == {"functionDeclarations"}
    declaration = body[0]["functionDeclarations"][0]
    assert set(declaration) == {"name", "description", "parameters"}
    for node in walk(declaration["parameters"]):
        assert set(node) <= GEMINI, set(node) - GEMINI
        assert node["type"] in GEMINI_TYPES
    assert "additionalProperties" not in declaration["parameters"]
    assert declaration["parameters"]["properties"]["amount_minor"]["format"] == "int64"


def test_an_unknown_format_is_a_400_naming_the_formats(agent):
    response = agent.get("/api/agent/tools?format=cohere")
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "invalid_request",
        "message": "Unknown format 'cohere'; the formats are openai, openai-responses, anthropic, mcp, gemini.",
    }


def test_what_strict_mode_does_not_advertise_the_parser_still_enforces(agent, o12):
    too_long = propose(agent, order_id="o" * 65, amount_minor=1, reason="damaged")
    assert too_long.status_code == 400 and "order_id" in too_long.json()["error"]["fields"]
    too_big = propose(agent, order_id="o-12", amount_minor=MAX_SAFE_MINOR + 1, reason="damaged")
    assert too_big.status_code == 400 and "amount_minor" in too_big.json()["error"]["fields"]
    negative = propose(agent, order_id="o-12", amount_minor=-1, reason="damaged")
    assert negative.status_code == 400 and "amount_minor" in negative.json()["error"]["fields"]


def test_the_listing_is_the_sessions_tools_in_every_format(alice):
    both = agent_client_for(alice, tools=("refund_order", "send_invoice"))
    only_refunds = agent_client_for(alice, tools=("refund_order",))
    assert [t["name"] for t in both.get("/api/agent/tools?format=anthropic").json()] == ["refund_order", "send_invoice"]
    assert [t["name"] for t in only_refunds.get("/api/agent/tools?format=anthropic").json()] == ["refund_order"]
    names = [d["name"] for d in both.get("/api/agent/tools?format=gemini").json()[0]["functionDeclarations"]]
    assert names == ["refund_order", "send_invoice"]
