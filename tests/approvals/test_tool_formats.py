"""GET /api/agent/tools?format=: one definition per action, in each model API's shape, each checked against
the schema subset that API documents (the keyword lists below are written from their documentation, not
taken from the code under test)."""

import re

import jsonschema
import mcp_types
import pytest

from approvals.core.arguments import MAX_SAFE_MINOR, input_json_schema
from approvals.models import Preview
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
# Anthropic strict tool use (structured outputs, "JSON Schema limitations": supported features). Not
# supported: minimum, maximum, multipleOf, minLength, maxLength, minItems other than 0 or 1.
ANTHROPIC_STRICT = {
    "type",
    "description",
    "properties",
    "required",
    "additionalProperties",
    "enum",
    "const",
    "default",
    "anyOf",
    "allOf",
    "items",
    "minItems",
    "pattern",
    "format",
    "$defs",
    "definitions",
    "$ref",
}
ANTHROPIC_STRING_FORMATS = {
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "uri",
    "ipv4",
    "ipv6",
    "uuid",
}
BOUNDS = {"minLength", "maxLength", "minimum", "maximum"}
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


def check_anthropic_strict(schema):
    assert schema["type"] == "object"
    for node in walk(schema):
        assert set(node) <= ANTHROPIC_STRICT, set(node) - ANTHROPIC_STRICT
        if "format" in node:
            assert node["format"] in ANTHROPIC_STRING_FORMATS
        if "minItems" in node:
            assert node["minItems"] in (0, 1)
        if node.get("type") == "object":
            assert node["additionalProperties"] is False
    jsonschema.Draft202012Validator.check_schema(schema)


def check_bounds_in_words(schema, *, integer="amount_minor", string="order_id"):
    """The bounds the parser enforces are gone from the schema and said in the description."""
    amount, order_id = schema["properties"][integer], schema["properties"][string]
    assert not BOUNDS & set(amount) and "format" not in amount and amount["type"] == "integer"
    assert amount["description"].endswith(f"An integer from 0 to {MAX_SAFE_MINOR}.")
    assert not BOUNDS & set(order_id)
    assert order_id["description"] == "The order's id as the customer sees it, e.g. o-12. 1 to 64 characters."


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


def test_anthropic_strict_tool_use(agent):
    tools = agent.get("/api/agent/tools?format=anthropic").json()
    assert len(tools) == 1
    assert set(tools[0]) == {"name", "description", "input_schema", "strict"}
    assert TOOL_NAME.match(tools[0]["name"]) and tools[0]["strict"] is True
    schema = tools[0]["input_schema"]
    check_anthropic_strict(schema)
    check_bounds_in_words(schema)
    assert sorted(schema["required"]) == ["amount_minor", "order_id", "reason"]
    assert schema["properties"]["reason"]["enum"] == ["damaged", "late", "unwanted"]


def test_mcp_carries_what_both_strict_modes_take(agent):
    body = agent.get("/api/agent/tools?format=mcp").json()
    tool = mcp_types.Tool.model_validate(body["tools"][0])
    assert tool.name == "refund_order"
    # A host hands inputSchema to OpenAI's API or Anthropic's, strict or not: it is valid in both.
    check_openai_strict(tool.input_schema)
    check_anthropic_strict(tool.input_schema)
    check_bounds_in_words(tool.input_schema)
    assert tool.annotations.destructive_hint is True and tool.annotations.idempotent_hint is True
    assert tool.annotations.read_only_hint is False


def test_every_format_but_the_contracts_and_gemini_leaves_out_the_bounds_of_every_tool(alice):
    both = agent_client_for(alice, tools=("refund_order", "send_invoice"))
    listings = {
        "openai": [t["function"]["parameters"] for t in both.get("/api/agent/tools?format=openai").json()],
        "openai-responses": [t["parameters"] for t in both.get("/api/agent/tools?format=openai-responses").json()],
        "anthropic": [t["input_schema"] for t in both.get("/api/agent/tools?format=anthropic").json()],
        "mcp": [t["inputSchema"] for t in both.get("/api/agent/tools?format=mcp").json()["tools"]],
    }
    for schemas in listings.values():
        assert len(schemas) == 2
        for schema in schemas:
            for node in walk(schema):
                assert not BOUNDS & set(node) and node.get("format") != "int64"
        assert schemas[1]["properties"]["recipient"]["description"].endswith(" 1 to 254 characters.")
    full = both.get("/api/agent/tools").json()["tools"][1]["input_schema"]["properties"]["recipient"]
    assert (full["minLength"], full["maxLength"]) == (1, 254)


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
    assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "invalid_arguments"
    assert too_long.json()["error"]["fields"] == {"order_id": ["Ensure this field has no more than 64 characters."]}
    too_big = propose(agent, order_id="o-12", amount_minor=MAX_SAFE_MINOR + 1, reason="damaged")
    assert too_big.status_code == 400 and too_big.json()["error"]["code"] == "invalid_arguments"
    assert too_big.json()["error"]["fields"] == {
        "amount_minor": [f"Ensure this value is less than or equal to {MAX_SAFE_MINOR}."]
    }
    negative = propose(agent, order_id="o-12", amount_minor=-1, reason="damaged")
    assert negative.status_code == 400 and negative.json()["error"]["code"] == "invalid_arguments"
    assert negative.json()["error"]["fields"] == {"amount_minor": ["Ensure this value is greater than or equal to 0."]}
    empty = propose(agent, order_id="", amount_minor=1, reason="damaged")
    assert empty.status_code == 400 and empty.json()["error"]["code"] == "invalid_arguments"
    assert list(empty.json()["error"]["fields"]) == ["order_id"]
    assert not Preview.objects.exists()


def test_the_listing_is_the_sessions_tools_in_every_format(alice):
    both = agent_client_for(alice, tools=("refund_order", "send_invoice"))
    only_refunds = agent_client_for(alice, tools=("refund_order",))
    assert [t["name"] for t in both.get("/api/agent/tools?format=anthropic").json()] == ["refund_order", "send_invoice"]
    assert [t["name"] for t in only_refunds.get("/api/agent/tools?format=anthropic").json()] == ["refund_order"]
    names = [d["name"] for d in both.get("/api/agent/tools?format=gemini").json()[0]["functionDeclarations"]]
    assert names == ["refund_order", "send_invoice"]
