"""Settings, every value from the environment.

The settings fail closed: `DEBUG` is off and there is no `SECRET_KEY` unless the environment gives
one, or asks for the demo (`DEMO=1`, which the `.demo.env` that `make run` writes sets) or for
`DEBUG=true`. Everything else has a safe embedded default: SQLite, Celery in eager mode, mail to the
console.
"""

import os
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()

# `make run` writes the demo's values (DEMO=1, the audit signing key) to this file, so that the README's
# back-office commands run on the demo as printed. A deployment sets SECRET_KEY, and then the file is not
# read at all; without either, the settings below still refuse to start.
DEMO_ENV_FILE = Path(os.environ.get("DEMO_ENV_FILE") or BASE_DIR / ".demo.env")
if "SECRET_KEY" not in os.environ and DEMO_ENV_FILE.is_file():
    environ.Env.read_env(DEMO_ENV_FILE)  # the environment's own values win

# The demo's values are used only when asked for: a deployment that forgot its variables must not
# run with DEBUG's URL listings and a key everyone can read in this file.
DEMO = env.bool("DEMO", default=False)
# Off in the demo too: it shows the app's own 404 and 500 pages, as a deployment does (DEBUG=true asks
# for Django's debug pages while developing).
DEBUG = env.bool("DEBUG", default=False)
SECRET_KEY = env.str("SECRET_KEY", default="")
if not SECRET_KEY:
    if not (DEMO or DEBUG):
        raise ImproperlyConfigured(
            "Set SECRET_KEY (a long random value), or DEMO=1 for the local demo "
            "(`make run` writes it to .demo.env, which every manage.py command then reads)."
        )
    SECRET_KEY = "insecure-embedded-demo-key-change-me"
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "csp",
    "oauth2_provider",
    "approvals",
    "refunds",
    "invoices",
]

MIDDLEWARE = [
    # First: the request id, request metrics, and /healthz, /readyz, /metrics before any host check.
    "approvals.operations.middleware.OperationsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
DATABASES["default"]["ATOMIC_REQUESTS"] = False
# Each web process (and worker) keeps its database connection across requests and tasks instead of
# opening one per request: connecting cost more than a whole proposal's queries (docs/benchmarks.md).
# A connection is checked before reuse and dropped after DATABASE_CONN_MAX_AGE seconds. A
# `?conn_max_age=` in DATABASE_URL wins.
DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("DATABASE_CONN_MAX_AGE", default=60))
DATABASES["default"].setdefault("CONN_HEALTH_CHECKS", env.bool("DATABASE_CONN_HEALTH_CHECKS", default=True))
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Parameters bound by the server, and each statement prepared on its connection once it has run
    # DATABASE_PREPARE_THRESHOLD times: the hot paths run the same few statements, and planning them
    # again each time was almost half of PostgreSQL's work (docs/benchmarks.md). Behind a PgBouncer in
    # transaction mode older than 1.21, set DATABASE_PREPARE_THRESHOLD=off.
    _prepare_threshold = env.str("DATABASE_PREPARE_THRESHOLD", default="2")
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        server_side_binding=True,
        prepare_threshold=None if _prepare_threshold.lower() in ("off", "none", "") else int(_prepare_threshold),
    )
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Concurrent writers (confirmations while the eager worker commits) wait for the lock instead of
    # failing at once with "database is locked"; IMMEDIATE takes the write lock when a transaction
    # begins, so that two readers never deadlock upgrading to writers (which no timeout helps).
    DATABASES["default"].setdefault("OPTIONS", {})
    DATABASES["default"]["OPTIONS"].setdefault("timeout", env.int("SQLITE_BUSY_TIMEOUT_SECONDS", default=20))
    DATABASES["default"]["OPTIONS"].setdefault("transaction_mode", "IMMEDIATE")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTHENTICATION_BACKENDS = ["approvals.site.login.ThrottledModelBackend"]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = env.str("TIME_ZONE", default="UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
# WhiteNoise serves every asset. A deployment serves them collected (`collectstatic`, STATIC_ROOT); the
# demo and development straight from the app's folders, with no collect step and DEBUG off or on.
WHITENOISE_USE_FINDERS = env.bool("WHITENOISE_USE_FINDERS", default=DEMO or DEBUG)
WHITENOISE_AUTOREFRESH = WHITENOISE_USE_FINDERS

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

REDIS_URL = env.str("REDIS_URL", default="")
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# Celery: with no broker configured, tasks run eagerly in the web process (the demo).
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=not REDIS_URL)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = 300
# Celery closes the database connection around every task unless told to reuse it; config/celery.py
# drops it instead when it is past DATABASE_CONN_MAX_AGE or broken, as Django does around requests.
CELERY_DB_REUSE_MAX = env.int("CELERY_DB_REUSE_MAX", default=1000)
# Queues by kind, each consumed by a worker pool of its own (Procfile, deploy/systemd, docs/operations.md),
# so that a slow webhook receiver or mail server never holds up money: `executions` (refunds, invoice
# sends, the sweepers and the resolver), `deliveries` (agent webhooks, audit checkpoints to webhooks and
# witnesses), `notifications` (reviewer mail and messages, customer mail). Every task is routed by name;
# tests/test_task_routes.py refuses a registered task missing here.
CELERY_QUEUES_BY_KIND = {
    "executions": [
        "approvals.execute_preview",
        "approvals.dispatch_stalled_previews",
        "approvals.resolve_unknown_executions",
        "approvals.expire_previews",
        "refunds.reconcile",
    ],
    "deliveries": [
        "approvals.deliver_agent_webhook",
        "approvals.resend_due_webhooks",
        "approvals.deliver_audit_checkpoint",
        "approvals.cosign_audit_checkpoint",
        "approvals.deliver_outbox",
        "approvals.sweep_outbox",
    ],
    "notifications": [
        "approvals.notify_reviewers",
        "approvals.notify_counter_proposal",
        "approvals.notify_passkeys_removed",
        "approvals.slack_post_review",
        "approvals.slack_update_review",
        "refunds.notify_refund_status",
    ],
}
CELERY_TASK_ROUTES = {task: {"queue": queue} for queue, tasks in CELERY_QUEUES_BY_KIND.items() for task in tasks}
CELERY_TASK_DEFAULT_QUEUE = "executions"
# /readyz answers 503 naming a queue whose oldest waiting message is older than this (0: not checked).
READYZ_QUEUE_AGE_MAX_SECONDS = env.float("READYZ_QUEUE_AGE_MAX_SECONDS", default=120.0)
# Longer than any task run plus its longest retry delay, or a running task is delivered twice.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT", default=3600),
    # How often a worker looks for messages a dead worker took and never acknowledged.
    "unacked_restore_interval": env.int("CELERY_UNACKED_RESTORE_INTERVAL", default=10),
    "unacked_restore_throttle": env.int("CELERY_UNACKED_RESTORE_THROTTLE", default=10),
}

EMAIL_BACKEND = env.str(
    "EMAIL_BACKEND",
    default=(
        "django.core.mail.backends.smtp.EmailBackend"
        if env.str("EMAIL_HOST", default="")
        else "django.core.mail.backends.console.EmailBackend"
    ),
)
EMAIL_HOST = env.str("EMAIL_HOST", default="localhost")
EMAIL_PORT = env.int("EMAIL_PORT", default=25)
EMAIL_HOST_USER = env.str("EMAIL_HOST_USER", default="")
EMAIL_HOST_PASSWORD = env.str("EMAIL_HOST_PASSWORD", default="")
EMAIL_USE_TLS = env.bool("EMAIL_USE_TLS", default=False)
EMAIL_USE_SSL = env.bool("EMAIL_USE_SSL", default=False)
EMAIL_TIMEOUT = env.int("EMAIL_TIMEOUT", default=10)
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="billing@shop.example.test")

# The gateway's own settings.
PREVIEW_TTL_SECONDS = env.int("PREVIEW_TTL_SECONDS", default=15 * 60)
# Previews that need a staff approval (large refunds, invoice sends) wait this long for it.
STAFF_REVIEW_TTL_SECONDS = env.int("STAFF_REVIEW_TTL_SECONDS", default=24 * 3600)
# Refunds above these amounts (minor units, per currency) also need a staff approval. `*` is the
# catch-all for other currencies; a currency with neither needs staff review for every refund.
STAFF_REVIEW_THRESHOLDS = {
    code.strip().upper(): int(amount)
    for code, amount in (
        item.split(":", 1)
        for item in env.list("STAFF_REVIEW_THRESHOLDS", default=["EUR:10000", "USD:10000"])
        if item.strip()
    )
}
AGENT_SESSION_DEFAULT_TTL_SECONDS = env.int("AGENT_SESSION_DEFAULT_TTL_SECONDS", default=8 * 3600)
AGENT_THROTTLE_RATE = env.str("AGENT_THROTTLE_RATE", default="120/min")
# Per person, across all their agent sessions: more sessions must not mean more calls.
AGENT_USER_THROTTLE_RATE = env.str("AGENT_USER_THROTTLE_RATE", default="240/min")
AGENT_SESSIONS_PER_USER_MAX = env.int("AGENT_SESSIONS_PER_USER_MAX", default=5)
# The shop data API (/api/shop/, docs/shop-data.md): calls per shop token.
SHOP_THROTTLE_RATE = env.str("SHOP_THROTTLE_RATE", default="600/min")
# Throttled and malformed tool calls are counted per session, minute and kind (approvals.CallTally);
# only the first ones of each minute also get a full audit record, so a flood cannot fill the log.
AGENT_REJECTED_CALLS_AUDITED_PER_MINUTE = env.int("AGENT_REJECTED_CALLS_AUDITED_PER_MINUTE", default=10)
# GET /api/agent/previews/<id>?wait=N holds a web thread while it waits: capped below GUNICORN_TIMEOUT,
# the preview read every AGENT_PREVIEW_WAIT_POLL_SECONDS (approvals/agents/api/previews.py). At most
# AGENT_PREVIEW_WAITS_PER_SESSION_MAX waits per agent session (counted in the cache, across processes) and
# AGENT_PREVIEW_WAITS_MAX per web process (half its threads, GUNICORN_THREADS, or 1) hold at once; past
# either the answer is the state now, with the header Preview-Wait-Declined.
AGENT_PREVIEW_WAIT_MAX_SECONDS = env.int("AGENT_PREVIEW_WAIT_MAX_SECONDS", default=10)
AGENT_PREVIEW_WAIT_POLL_SECONDS = env.float("AGENT_PREVIEW_WAIT_POLL_SECONDS", default=0.5)
AGENT_PREVIEW_WAITS_PER_SESSION_MAX = env.int("AGENT_PREVIEW_WAITS_PER_SESSION_MAX", default=2)
AGENT_PREVIEW_WAITS_MAX = env.int(
    "AGENT_PREVIEW_WAITS_MAX", default=max(1, env.int("GUNICORN_THREADS", default=1) // 2)
)
# Agent session webhooks (approvals/agents/webhooks.py): delivery attempts and the whole time of each (the
# address lookup, connecting, sending and reading the answer, of which at most 1 KiB is read).
AGENT_WEBHOOK_MAX_ATTEMPTS = env.int("AGENT_WEBHOOK_MAX_ATTEMPTS", default=8)
AGENT_WEBHOOK_DEADLINE_SECONDS = env.float("AGENT_WEBHOOK_DEADLINE_SECONDS", default=10.0)
AGENT_WEBHOOK_BACKOFF_SECONDS = env.float("AGENT_WEBHOOK_BACKOFF_SECONDS", default=10.0)
# Webhook URLs resolving to private, loopback or link-local addresses are refused unless this is set
# (server-side request forgery, docs/agents.md); the embedded demo and the tests allow them.
AGENT_WEBHOOK_ALLOW_PRIVATE = env.bool("AGENT_WEBHOOK_ALLOW_PRIVATE", default=DEMO)
# MCP authorization (approvals/agents/oauth/, docs/agents.md): OAuth 2.1 with django-oauth-toolkit.
# Authorization code with PKCE (S256 only) and refresh tokens, nothing else; public clients named by a
# Client ID Metadata Document URL (fetched under the webhook URLs' SSRF rules), no dynamic registration.
# Access tokens are short-lived and rotate with their refresh token; tokens are stored hashed.
OAUTH_ACCESS_TOKEN_SECONDS = env.int("OAUTH_ACCESS_TOKEN_SECONDS", default=600)
# The lifetimes a customer may pick on the consent page (seconds); the agent session ends with it.
OAUTH_CONSENT_LIFETIMES = [
    int(value) for value in env.list("OAUTH_CONSENT_LIFETIMES", default=["3600", "28800", "86400", "604800"])
]
# Tests only: a CA file trusted for client metadata documents served on a loopback address (https).
# Empty (the default and any deployment) keeps loopback and private addresses refused.
OAUTH_CIMD_TEST_LOOPBACK_CA_FILE = ""
# The toolkit's own models (named, as its swappable models are, so migrations can depend on them).
OAUTH2_PROVIDER_APPLICATION_MODEL = "oauth2_provider.Application"
OAUTH2_PROVIDER_GRANT_MODEL = "oauth2_provider.Grant"
OAUTH2_PROVIDER_ACCESS_TOKEN_MODEL = "oauth2_provider.AccessToken"
OAUTH2_PROVIDER_REFRESH_TOKEN_MODEL = "oauth2_provider.RefreshToken"
OAUTH2_PROVIDER_ID_TOKEN_MODEL = "oauth2_provider.IDToken"
# Native MCP clients listen on a loopback http URL for the redirect (RFC 8252 §7.3); the validator takes
# http redirect URIs on loopback hosts only (approvals.agents.oauth.validator.redirect_uri_acceptable),
# which the toolkit's scheme-wide check (W008) cannot express.
SILENCED_SYSTEM_CHECKS = ["oauth2_provider.W008"]
OAUTH2_PROVIDER = {
    "OAUTH2_VALIDATOR_CLASS": "approvals.agents.oauth.validator.GatewayOAuth2Validator",
    "SCOPES": {"mcp": "Use the gateway's tools as you, through MCP"},
    "DEFAULT_SCOPES": ["mcp"],
    "PKCE_REQUIRED": True,
    "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,
    "COMPLIANT_BCP_RFC9700_IMPLICIT_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PASSWORD_GRANT": True,
    "COMPLIANT_BCP_RFC9700_ACCESS_TOKEN_TRANSPORT": True,
    "COMPLIANT_BCP_RFC9700_TOKEN_STORAGE": True,
    "COMPLIANT_BCP_RFC9700_REFRESH_TOKEN": True,
    "COMPLIANT_BCP_RFC9700_PKCE_REQUIRED": True,
    "COMPLIANT_BCP_RFC9700_AUTHZ_RESPONSE_ISS": True,
    "ACCESS_TOKEN_EXPIRE_SECONDS": OAUTH_ACCESS_TOKEN_SECONDS,
    "AUTHORIZATION_CODE_EXPIRE_SECONDS": 60,
    "ROTATE_REFRESH_TOKEN": True,
    "REFRESH_TOKEN_REUSE_PROTECTION": True,
    "OAUTH2_RESPONSE_TYPES_SUPPORTED": ["code"],
    "OAUTH2_GRANT_TYPES_SUPPORTED": ["authorization_code", "refresh_token"],
    "OAUTH2_TOKEN_ENDPOINT_AUTH_METHODS_SUPPORTED": ["none"],
    "CIMD_ENABLED": True,
    "CIMD_METADATA_FETCHER": "approvals.agents.oauth.cimd.GatewayMetadataFetcher",
    "CIMD_MAX_DOCUMENT_SIZE": 5 * 1024,
    "CIMD_FETCH_TIMEOUT_SECONDS": 5,
    "OAUTH2_PROTECTED_RESOURCE_NAME": "Approval gateway MCP server",
}
# The gateway's public address: absolute URLs in messages sent outside a request (agent webhooks,
# approver notifications).
PUBLIC_BASE_URL = env.str("PUBLIC_BASE_URL", default="http://127.0.0.1:8000").rstrip("/")
PAYMENT_GATEWAY = env.str("PAYMENT_GATEWAY", default="local")
STRIPE_API_KEY = env.str("STRIPE_API_KEY", default="")
STRIPE_API_BASE = env.str("STRIPE_API_BASE", default="https://api.stripe.com")
STRIPE_TIMEOUT_SECONDS = env.float("STRIPE_TIMEOUT_SECONDS", default=10.0)
# Reads only (the refundable remainder before a refund): the SDK retries them itself, with its back-off.
STRIPE_READ_RETRIES = env.int("STRIPE_READ_RETRIES", default=2)

# Payments (docs/payments.md). Stripe's webhook signing secret (whsec_…) for POST /payments/stripe/webhook;
# unset, the endpoint answers 404. Events signed longer ago than the tolerance are refused.
STRIPE_WEBHOOK_SECRET = env.str("STRIPE_WEBHOOK_SECRET", default="")
STRIPE_WEBHOOK_TOLERANCE_SECONDS = env.int("STRIPE_WEBHOOK_TOLERANCE_SECONDS", default=300)
# The status the local gateway gives a new refund: `succeeded`, or `pending` to show the bank's step.
LOCAL_GATEWAY_REFUND_STATUS = env.str("LOCAL_GATEWAY_REFUND_STATUS", default="succeeded")
if LOCAL_GATEWAY_REFUND_STATUS not in ("succeeded", "pending"):
    raise ImproperlyConfigured("LOCAL_GATEWAY_REFUND_STATUS must be 'succeeded' or 'pending'.")
# How often the beat runs the reconciliation with the provider (refunds.reconcile).
RECONCILE_INTERVAL_SECONDS = env.int("RECONCILE_INTERVAL_SECONDS", default=3600)


def _minor_limits(name: str) -> dict[str, int]:
    """`EUR:50000,USD:50000` (minor units per currency, `*` for the others); unset means no limit."""
    limits = {}
    for item in env.list(name, default=[]):
        code, _, amount = item.strip().partition(":")
        if not code or not amount.strip().isdigit():
            raise ImproperlyConfigured(f"{name}: {item!r} is not CURRENCY:AMOUNT_IN_MINOR_UNITS")
        limits[code.strip().upper()] = int(amount)
    return limits


# Spending limits (approvals.core.limits): per agent session per day, per customer over 30 days, proposals
# per agent session per hour. Unset means no limit.
SPEND_LIMIT_AGENT_DAILY = _minor_limits("SPEND_LIMIT_AGENT_DAILY")
SPEND_LIMIT_CUSTOMER_30D = _minor_limits("SPEND_LIMIT_CUSTOMER_30D")
SPEND_LIMIT_AGENT_HOURLY_COUNT = env.int("SPEND_LIMIT_AGENT_HOURLY_COUNT", default=0) or None
# Largest request body the agent API accepts.
DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("DATA_UPLOAD_MAX_MEMORY_SIZE", default=64 * 1024)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": ["approvals.agents.api.parsers.StrictJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "approvals.agents.api.errors.api_exception_handler",
    "UNAUTHENTICATED_USER": None,
    # `?format=openai` belongs to the tools listing, not to DRF's renderer negotiation.
    "URL_FORMAT_OVERRIDE": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Approval gateway agent API",
    "DESCRIPTION": "Agents propose actions; people approve exact previews; workers execute them once.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # The shop data API's records carry the actions' own choice sets (named here, by import path).
    "ENUM_NAME_OVERRIDES": {
        "StatusEnum": "approvals.models.PreviewStatus",
        "OutcomeEnum": "approvals.models.ExecutionOutcome",
        "ShopWriteOutcomeEnum": ["created", "updated", "unchanged"],
        "OrderStatusEnum": "refunds.models.OrderStatus",
        "InvoiceStatusEnum": "invoices.models.InvoiceStatus",
    },
}

# Every asset is served by the app itself; nothing inline, nothing from elsewhere.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

# Login attempts per username (as Django normalizes it, case-folded) and per client address before
# every login path (the login page, the admin, anything calling authenticate()) pauses them.
LOGIN_FAILURE_LIMIT = env.int("LOGIN_FAILURE_LIMIT", default=5)
LOGIN_FAILURE_WINDOW_SECONDS = env.int("LOGIN_FAILURE_WINDOW_SECONDS", default=15 * 60)
# While a username is paused, this many addresses with no failure on it may each try it once per window
# (its person logs in from elsewhere); 0 pauses a paused username from every address.
LOGIN_PAUSE_CLEAN_ADDRESS_TRIES = env.int("LOGIN_PAUSE_CLEAN_ADDRESS_TRIES", default=5)
# The client's address: REMOTE_ADDR, unless the app runs behind TRUSTED_PROXY_COUNT proxies that each
# append the address they saw to CLIENT_IP_HEADER (the Django META name of the header).
TRUSTED_PROXY_COUNT = env.int("TRUSTED_PROXY_COUNT", default=0)
CLIENT_IP_HEADER = env.str("CLIENT_IP_HEADER", default="HTTP_X_FORWARDED_FOR")
# The Django admin (read-only for the gateway's records) is served only when asked for, or in DEBUG or the demo.
ADMIN_ENABLED = env.bool("ADMIN_ENABLED", default=DEBUG or DEMO)

HTTPS = env.bool("HTTPS", default=False)
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
if HTTPS:
    SECURE_SSL_REDIRECT = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True

# Logs: `text` (readable, the default, as `make run` prints) or `json` (one object per line, for
# production). Either way each line carries the request, preview, agent session and action it belongs
# to, where known, and secrets are scrubbed (approvals/operations/probes/logs.py).
LOG_FORMAT = env.str("LOG_FORMAT", default="text")
if LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be 'text' or 'json', not {LOG_FORMAT!r}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "approvals.operations.logs.ContextFilter"}},
    "formatters": {
        "text": {"()": "approvals.operations.logs.TextFormatter"},
        "json": {"()": "approvals.operations.logs.JsonFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "filters": ["context"], "formatter": LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    # Django's own loggers go through the handler above only (its default adds a plain console handler
    # with DEBUG on, which would print each of their lines twice, once not as JSON).
    "loggers": {"django": {"handlers": [], "level": env.str("LOG_LEVEL", default="INFO"), "propagate": True}},
}

# GET /metrics answers only `Authorization: Bearer <METRICS_TOKEN>`; unset, the endpoint is off (404).
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")
# A Celery worker serves its own /metrics (same token) on this port when set (docs/operations.md).
CELERY_METRICS_PORT = env.int("CELERY_METRICS_PORT", default=0)
CELERY_METRICS_ADDR = env.str("CELERY_METRICS_ADDR", default="127.0.0.1")

# Error reporting to Sentry, only when SENTRY_DSN is set; scrubbed like the logs (config/sentry.py).
SENTRY_DSN = env.str("SENTRY_DSN", default="")
SENTRY_ENVIRONMENT = env.str("SENTRY_ENVIRONMENT", default="production")
SENTRY_TRACES_SAMPLE_RATE = env.float("SENTRY_TRACES_SAMPLE_RATE", default=0.0)
if SENTRY_DSN:
    from config.sentry import sentry_init

    sentry_init(dsn=SENTRY_DSN, environment=SENTRY_ENVIRONMENT, traces_sample_rate=SENTRY_TRACES_SAMPLE_RATE)

# An approved preview whose execution no worker took after this long is published again by the sweeper.
EXECUTION_STALL_SECONDS = env.int("EXECUTION_STALL_SECONDS", default=60)
# How long one attempt holds an execution: longer than one provider call with its time-out, so that
# only a dead or stuck worker's lease expires and is taken over (docs/execution.md).
EXECUTION_LEASE_SECONDS = env.int("EXECUTION_LEASE_SECONDS", default=120)
# A first effect may be made until this long after the approval; later, a new proposal is needed.
EXECUTION_DEADLINE_SECONDS = env.int("EXECUTION_DEADLINE_SECONDS", default=86400)
# The resolver looks up an unknown effect again at most this often per execution.
EXECUTION_RESOLVE_INTERVAL_SECONDS = env.int("EXECUTION_RESOLVE_INTERVAL_SECONDS", default=300)

# The audit log (docs/audit.md): the Ed25519 key that signs tree heads (base64 of its 32 bytes; `make run`
# generates one; without it nothing is sealed; during a key rotation two, comma-separated, the new one
# first: checkpoints are then signed by both), where signed tree heads are published, and how often the
# sealer (`manage.py seal_audit --loop`, one process) looks for committed records.
AUDIT_SIGNING_KEY = env.str("AUDIT_SIGNING_KEY", default="")
# Public keys (base64) of earlier signing keys, which still verify the checkpoints they signed.
AUDIT_SIGNING_KEYS_RETIRED = env.list("AUDIT_SIGNING_KEYS_RETIRED", default=[])
# The log's name in its c2sp.org/tlog-checkpoint notes (and the signing key's name): by default the host of
# PUBLIC_BASE_URL plus /audit, the scheme-less URL of its tiles.
AUDIT_LOG_ORIGIN = env.str("AUDIT_LOG_ORIGIN", default="") or (
    PUBLIC_BASE_URL.split("://", 1)[-1].split("/", 1)[0] + "/audit"
)
# Entry bundles (GET /audit/tile/entries/...) hold the records, personal data: a bearer token reads them.
# Hash tiles and checkpoints are public. Without the token, entry bundles are refused to everyone.
AUDIT_READ_TOKEN = env.str("AUDIT_READ_TOKEN", default="")
# Witnesses (c2sp.org/tlog-witness) asked to cosign each checkpoint: comma-separated
# `<witness vkey>=<add-checkpoint URL>`; a checkpoint is published once AUDIT_WITNESS_QUORUM (default: all
# of them) have cosigned it.
AUDIT_WITNESSES = env.list("AUDIT_WITNESSES", default=[])
AUDIT_WITNESS_QUORUM = env.int("AUDIT_WITNESS_QUORUM", default=len(AUDIT_WITNESSES))
# The whole time one submission to the witnesses may take (all of them at once, a retry after a 409
# included), so that a slow witness holds a `deliveries` worker no longer than this.
AUDIT_WITNESS_DEADLINE_SECONDS = env.float("AUDIT_WITNESS_DEADLINE_SECONDS", default=10.0)
# A witness that refused or did not answer is sent the latest head again no sooner than this (the task's
# retries start there and double); a checkpoint it refused is never sent to it again.
AUDIT_WITNESS_RETRY_SECONDS = env.float("AUDIT_WITNESS_RETRY_SECONDS", default=30.0)
# /readyz reports the witnesses as degraded (it still answers 200: money does not wait for witnesses)
# when the oldest tree head not yet published has waited longer than this for its cosignatures.
AUDIT_WITNESS_LAG_MAX_SECONDS = env.float("AUDIT_WITNESS_LAG_MAX_SECONDS", default=300.0)
AUDIT_CHECKPOINT_FILE = env.str("AUDIT_CHECKPOINT_FILE", default="")
AUDIT_CHECKPOINT_WEBHOOKS = env.list("AUDIT_CHECKPOINT_WEBHOOKS", default=[])
AUDIT_CHECKPOINT_WEBHOOK_SECRET = env.str("AUDIT_CHECKPOINT_WEBHOOK_SECRET", default="")
if AUDIT_CHECKPOINT_WEBHOOKS and not AUDIT_CHECKPOINT_WEBHOOK_SECRET:
    raise ImproperlyConfigured("AUDIT_CHECKPOINT_WEBHOOKS needs AUDIT_CHECKPOINT_WEBHOOK_SECRET (whsec_…).")
AUDIT_SEAL_INTERVAL_SECONDS = env.float("AUDIT_SEAL_INTERVAL_SECONDS", default=0.25)

# Approver notifications (approvals.console.notifications, with PUBLIC_BASE_URL above): Standard Webhooks
# receivers (a Slack or Teams incoming webhook takes the `text` field), their signing secret (whsec_…),
# how often the digest task sends what is pending (one message per person and URL), and escalation of
# previews still waiting for staff after that many seconds (0: never).
REVIEW_NOTIFY_WEBHOOKS = [url.strip() for url in env.list("REVIEW_NOTIFY_WEBHOOKS", default=[]) if url.strip()]
REVIEW_NOTIFY_SECRET = env.str("REVIEW_NOTIFY_SECRET", default="")
REVIEW_NOTIFY_INTERVAL_SECONDS = env.int("REVIEW_NOTIFY_INTERVAL_SECONDS", default=60)
REVIEW_NOTIFY_BATCH_SECONDS = env.int("REVIEW_NOTIFY_BATCH_SECONDS", default=30)
REVIEW_NOTIFY_TIMEOUT_SECONDS = env.float("REVIEW_NOTIFY_TIMEOUT_SECONDS", default=5.0)
REVIEW_ESCALATE_AFTER_SECONDS = env.int("REVIEW_ESCALATE_AFTER_SECONDS", default=4 * 3600)
REVIEW_ESCALATE_EMAILS = [a.strip() for a in env.list("REVIEW_ESCALATE_EMAILS", default=[]) if a.strip()]
# M-of-N staff approval per action, currency and amount band: `refund_order:EUR:100000:2,…` (approvals.core.quorum).
REVIEW_QUORUM = env.str("REVIEW_QUORUM", default="")
# Reviewing in Slack (approvals.console.slack, docs/console.md): all three set, every preview that starts
# waiting for staff is posted to the review channel, and POST /integrations/slack/interactions takes the
# buttons; any unset, nothing is posted and that endpoint is a 404. SLACK_API_URL: the tests' local server.
SLACK_BOT_TOKEN = env.str("SLACK_BOT_TOKEN", default="")
SLACK_SIGNING_SECRET = env.str("SLACK_SIGNING_SECRET", default="")
SLACK_REVIEW_CHANNEL = env.str("SLACK_REVIEW_CHANNEL", default="")
SLACK_API_URL = env.str("SLACK_API_URL", default="https://slack.com/api/")
SLACK_TIMEOUT_SECONDS = env.int("SLACK_TIMEOUT_SECONDS", default=5)
# Passkeys (approvals.core.stepup, docs/security.md): approvals that need a passkey assertion over the
# preview's digest, by action, currency (or `*`) and from an amount in minor units, for staff
# (`refund_order:EUR:50000,send_invoice:*:0`) and for the customer's confirmation; unset, none does. The
# relying party: WEBAUTHN_RP_ID (default: PUBLIC_BASE_URL's host) and WEBAUTHN_ORIGINS (comma-separated;
# default: PUBLIC_BASE_URL's origin). `manage.py check` refuses values it cannot read.
STEP_UP_THRESHOLDS = env.str("STEP_UP_THRESHOLDS", default="")
CUSTOMER_STEP_UP_THRESHOLDS = env.str("CUSTOMER_STEP_UP_THRESHOLDS", default="")
WEBAUTHN_RP_ID = env.str("WEBAUTHN_RP_ID", default="")
WEBAUTHN_ORIGINS = [o.strip().rstrip("/") for o in env.list("WEBAUTHN_ORIGINS", default=[]) if o.strip()]

# The outbox (approvals.core.outbox): a message not delivered this long after it was recorded (or after its
# last attempt's backoff) is handed to a worker again by the beat's sweep, which runs this often.
OUTBOX_GRACE_SECONDS = env.float("OUTBOX_GRACE_SECONDS", default=30.0)
OUTBOX_SWEEP_INTERVAL_SECONDS = env.float("OUTBOX_SWEEP_INTERVAL_SECONDS", default=15.0)

CELERY_BEAT_SCHEDULE = {
    "sweep-outbox": {"task": "approvals.sweep_outbox", "schedule": OUTBOX_SWEEP_INTERVAL_SECONDS},
    "notify-reviewers": {"task": "approvals.notify_reviewers", "schedule": float(REVIEW_NOTIFY_INTERVAL_SECONDS)},
    "expire-previews": {"task": "approvals.expire_previews", "schedule": 60.0},
    "dispatch-stalled-previews": {"task": "approvals.dispatch_stalled_previews", "schedule": 30.0},
    "resolve-unknown-executions": {"task": "approvals.resolve_unknown_executions", "schedule": 60.0},
    "reconcile-payments": {"task": "refunds.reconcile", "schedule": float(RECONCILE_INTERVAL_SECONDS)},
    "resend-due-webhooks": {"task": "approvals.resend_due_webhooks", "schedule": 300.0},
}
if AUDIT_WITNESSES:  # the latest tree head to witnesses that missed it (down, or a broker outage)
    CELERY_BEAT_SCHEDULE["cosign-audit-checkpoint"] = {"task": "approvals.cosign_audit_checkpoint", "schedule": 60.0}
if SLACK_BOT_TOKEN:  # posts what a lost publication missed, and updates messages a failed chat.update left stale
    CELERY_BEAT_SCHEDULE["slack-sync-reviews"] = {
        "task": "approvals.slack_post_review",
        "schedule": float(REVIEW_NOTIFY_INTERVAL_SECONDS),
    }
# Publishing to a broker that is down fails fast; the sweeper publishes again later.
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}
CELERY_BROKER_CONNECTION_TIMEOUT = 2

SHOP_NAME = env.str("SHOP_NAME", default="Example Shop")
