"""The fault campaign (`make chaos`): a stack of its own on loopback addresses (a throwaway PostgreSQL
primary and streaming standby, Redis, gunicorn, a worker per queue, beat, the sealer, the Stripe-compatible
test server behind a TCP fault proxy, an SMTP peer), traffic while faults are injected, then the invariants.
See docs/reliability.md."""
