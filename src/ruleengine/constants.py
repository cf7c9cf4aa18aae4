"""Collection names, Redis keys and fixed limits shared by the processes."""

from __future__ import annotations

from typing import Final

# MongoDB collections
RULES: Final = "rules"
RULE_VERSIONS: Final = "rule_versions"
ACCOUNTS: Final = "accounts"
BATCHES: Final = "batches"
EXECUTIONS: Final = "executions"
EVALUATIONS: Final = "evaluations"  # a batch's evaluations in chunks (store/evaluations.py)
ACTION_INTENTS: Final = "action_intents"
ERROR_LOG: Final = "error_log"
FOLLOWUPS: Final = "followups"
HOLDS: Final = "holds"  # oscillation holds (store/holds.py)
HEARTBEATS: Final = "heartbeats"
ROLLUPS: Final = "rollups"
ROLLUP_DAYS: Final = "rollup_days"
LISTING_SNAPSHOTS: Final = "listing_snapshots"
INSIGHTS_HISTORY: Final = "insights_history"
BACKTEST_LISTINGS: Final = "backtest_listings"
BACKTESTS: Final = "backtests"
API_TOKENS: Final = "api_tokens"  # named API tokens with roles (store/api_tokens.py)
APPROVALS: Final = "approvals"  # planned changes waiting for a person (store/approvals.py)
LOCK_FENCES: Final = "lock_fences"  # the write locks' fencing counters (store/fences.py)

# Redis
QUEUE_NAME: Final = "ruleengine:queue"
LEASE_KEY: Final = "ruleengine:dispatcher:lease"
FENCE_KEY: Final = "ruleengine:dispatcher:fence"
DISPATCHED_KEY_PREFIX: Final = "ruleengine:dispatched:"
ACCOUNT_LOCK_PREFIX: Final = "ruleengine:lock:account:"
#: Redis key of the turn to claim one batch's due follow-ups (``followups/running.py``).
FOLLOWUP_CLAIM_PREFIX: Final = "ruleengine:turn:followups:"

# arq job function names
EVALUATE_JOB: Final = "evaluate_account"
FOLLOWUP_JOB: Final = "run_followup"
APPROVAL_JOB: Final = "apply_approval"
UNDO_JOB: Final = "undo_batch"

# The 4 named stages of an evaluation, timed in every execution record and batch trace
STAGES: Final = ("cooldown", "fetch", "evaluate", "act")

# Meta's own limits
BATCH_MAX_ITEMS: Final = 50
ADSET_BUDGET_CHANGES_PER_HOUR: Final = 4
