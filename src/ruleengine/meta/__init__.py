"""The Graph API client: the HTTP session and its cost counting (``http``), Meta's errors
(``errors``), the read-only reader (``reader``: GET only — what the dispatcher, the preview
and the web use), Batch API reads (``batch``), Insights (``insights``, ``reports``,
``pacing``, ``rows``, ``by_day``), the ad account (``adaccount``), copies (``copies``) and
``writer`` — the one instrumented wrapper every write to Meta goes through.

May import: ``rules`` and the basics (``errors``, ``constants``, ``settings``, ``redact``).
"""
