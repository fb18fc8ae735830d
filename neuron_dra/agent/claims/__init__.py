"""Claim preparation: from an allocated ResourceClaim to what the containers get.

Owns: the claim plan (pure: allocation results and opaque configs to devices,
cores and environment), CDI specs, device metadata files (KEP-5304), the
crash-safe checkpoint, and the preparer that runs them one claim at a time,
idempotently, across restarts and a rolling update's second plugin.
May use: `telemetry` (metrics), `apiclient` (its errors), `objects` (the decoded
claim), `files`, `hardware`,
`api`, `consts`.
"""
