"""MCP authorization: OAuth 2.1 for remote MCP clients, with django-oauth-toolkit (`oauth2_provider`).

What a remote client finds and does (MCP authorization, revision 2026-07-28):
- `/mcp` answers a request without a valid token with 401 and `WWW-Authenticate: Bearer
  resource_metadata="<origin>/.well-known/oauth-protected-resource"`; that document (RFC 9728) names
  `/mcp` as the resource and this server as its authorization server, whose metadata (RFC 8414) is at
  `/.well-known/oauth-authorization-server`.
- The client names itself by the https URL of its Client ID Metadata Document (no dynamic
  registration); the toolkit fetches it (approvals.agents.oauth.cimd: the webhook URLs' rules, public
  addresses only, no redirects, 5 KiB at most), checks that it names the same client_id, and keeps it
  as a public Application whose redirect URIs are the document's.
- `/oauth/authorize/` (authorization code, PKCE with S256 only) signs the customer in with the site's
  login and shows the consent page: the client's name and host, the tools the token will allow, and a
  lifetime. Consent mints an agent session for the customer (approvals.agents.oauth.sessions), bound
  to the authorization code and then to the family of refresh tokens the code is exchanged for.
- `/oauth/token/` issues short-lived access tokens whose refresh tokens rotate; each access token acts
  as that agent session (approvals.agents.oauth.tokens): the same tools, limits, throttles and audit
  as its bearer agent token, which is never shown. `/oauth/revoke_token/` revokes the token and the
  session; revoking the session (console, `revoke_agent_session`) revokes its tokens.
"""
