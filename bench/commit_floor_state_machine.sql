-- pgbench custom script: the commit pipeline's floor as the state machine sends it (docs/benchmarks.md).
--
-- One refund execution's 23 statements, in the executor's three recovery points, with the local gateway
-- between them, copied from what `preview_execute` sends (`python -m bench.profile_executions` prints
-- them; tests/bench/test_bench_pieces.py checks this file against a real execution's statements):
--   1. the lease: lock the preview with its execution and the order, read the approvals and the money in
--      flight, take the lease (attempt and fencing token), one audit record, COMMIT;
--   2. the local gateway: the payment's refunded remainder, its refund row (a transaction of its own, as
--      a provider's is), the refund read back by its idempotency key;
--   3. the recording: lock again, the ledger row, the order's remainder, the execution's and the preview's
--      outcome, one audit record, the siblings to supersede (none here), COMMIT.
-- No broker, no worker, no Python. bench/run.py prepares one approved preview per transaction (with its
-- pending execution and the customer's approval) in bench_commit_floor (n, preview_id, order_id, number,
-- customer_id, payment_ref), and runs it with as many clients as there are workers:
--
--   pgbench -n -c 2 -j 2 -t 2000 -f bench/commit_floor_state_machine.sql <bench database>

SELECT nextval('bench_commit_floor_seq') AS n \gset
SELECT preview_id, order_id, number, customer_id, payment_ref FROM bench_commit_floor WHERE n = :n \gset
BEGIN;
SELECT p.*, e.*, (SELECT s.revoked_at IS NOT NULL FROM approvals_agentsession s WHERE s.id = p.agent_session_id),
       COALESCE((SELECT s.webhook_url <> '' FROM approvals_agentsession s WHERE s.id = p.agent_session_id), false)
  FROM approvals_preview p JOIN approvals_execution e ON e.preview_id = p.id WHERE p.id = ':preview_id' FOR UPDATE;
SELECT * FROM refunds_order WHERE customer_id = :customer_id AND number = ':number' FOR UPDATE;
SELECT * FROM approvals_approval WHERE preview_id = ':preview_id';
SELECT COALESCE(SUM(p.amount_minor), 0) FROM approvals_preview p JOIN approvals_execution e ON e.preview_id = p.id
  WHERE p.subject_id = ':number' AND p.subject_type = 'order'
    AND e.outcome IN ('in_progress', 'effect_unknown', 'effect_unrecorded') AND p.id <> ':preview_id';
UPDATE approvals_execution SET outcome = 'in_progress', attempt = 1, fencing_token = 1, lease_owner = 'floor',
       lease_expires_at = now() + interval '2 minutes', effect_possible = true, effect = NULL, code = '', detail = '',
       updated_at = now()
  WHERE preview_id = ':preview_id';
INSERT INTO approvals_auditrecord (created_at, event, action, preview_id, actor_id, agent_session_id, subject_type,
                                   subject_id, raw_arguments, approval_basis, result)
  VALUES (now(), 'execution_started', 'refund_order', ':preview_id', NULL, NULL, 'order', ':number', '', NULL,
          '{"attempt": 1, "fencing_token": 1, "lease_owner": "floor", "look_up_first": false, "outcome": "in_progress", "outcome_from": "pending", "status": "approved", "subject_version": 1, "took_over": false}')
  RETURNING id;
COMMIT;
SELECT amount_minor FROM refunds_localgatewayrefund WHERE payment_ref = ':payment_ref' AND NOT status IN ('failed', 'canceled');
BEGIN;
INSERT INTO refunds_localgatewayrefund (idempotency_key, refund_id, payment_ref, amount_minor, currency, status,
                                        status_reason, created_at)
  VALUES ('refund::preview_id', 'lr_floor_:n', ':payment_ref', 500, 'EUR', 'succeeded', '', now()) ON CONFLICT DO NOTHING;
COMMIT;
SELECT * FROM refunds_localgatewayrefund WHERE idempotency_key = 'refund::preview_id' ORDER BY id ASC LIMIT 1;
BEGIN;
SELECT p.*, e.*, (SELECT s.revoked_at IS NOT NULL FROM approvals_agentsession s WHERE s.id = p.agent_session_id),
       COALESCE((SELECT s.webhook_url <> '' FROM approvals_agentsession s WHERE s.id = p.agent_session_id), false)
  FROM approvals_preview p JOIN approvals_execution e ON e.preview_id = p.id WHERE p.id = ':preview_id' FOR UPDATE;
SELECT * FROM refunds_order WHERE number = ':number' FOR UPDATE;
INSERT INTO refunds_refund (order_id, preview_id, amount_minor, currency, reason, gateway_refund_id, status,
                            status_reason, status_changed_at, created_at)
  VALUES (:order_id, ':preview_id', 500, 'EUR', 'damaged', 'lr_floor_:n', 'succeeded', '', NULL, now()) RETURNING id;
UPDATE refunds_order SET refunded_minor = 500, version = 2, updated_at = now() WHERE id = :order_id;
UPDATE approvals_execution SET outcome = 'succeeded', attempt = 1, fencing_token = 1, lease_owner = '',
       lease_expires_at = NULL, effect_possible = true,
       effect = '{"refund_id": "lr_floor_:n", "amount_minor": 500, "currency": "EUR", "refund_status": "succeeded", "refund_status_reason": ""}',
       code = '', detail = '', updated_at = now()
  WHERE preview_id = ':preview_id';
UPDATE approvals_preview SET status = 'executed', failure_code = '', failure_reason = '', status_changed_at = now(),
       result = '{"refund_id": "lr_floor_:n", "order_id": ":number", "amount_minor": 500, "currency": "EUR", "order_refunded_minor": 500, "refund_status": "succeeded"}',
       executed_at = now()
  WHERE id = ':preview_id';
INSERT INTO approvals_auditrecord (created_at, event, action, preview_id, actor_id, agent_session_id, subject_type,
                                   subject_id, raw_arguments, approval_basis, result)
  VALUES (now(), 'executed', 'refund_order', ':preview_id', NULL, NULL, 'order', ':number', '',
          '{"customer": [{"approver": :customer_id, "basis": "", "digest": "0000000000000000000000000000000000000000000000000000000000000000"}]}',
          '{"amount_minor": 500, "attempt": 1, "currency": "EUR", "effect": {"amount_minor": 500, "currency": "EUR", "refund_id": "lr_floor_:n", "refund_status": "succeeded", "refund_status_reason": ""}, "fencing_token": 1, "order_id": ":number", "order_refunded_minor": 500, "outcome": "succeeded", "outcome_from": "in_progress", "refund_id": "lr_floor_:n", "refund_status": "succeeded", "status": "executed"}')
  RETURNING id;
SELECT id FROM approvals_preview WHERE subject_type = 'order' AND subject_id = ':number'
    AND status IN ('awaiting_customer', 'awaiting_staff', 'approved') AND id <> ':preview_id' AND subject_version <> 2
    AND NOT EXISTS (SELECT 1 FROM approvals_execution e WHERE e.preview_id = approvals_preview.id
                    AND e.outcome NOT IN ('pending', 'awaiting_approval'))
  ORDER BY id FOR UPDATE OF approvals_preview SKIP LOCKED;
COMMIT;
