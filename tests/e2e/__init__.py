"""End-to-end tests against a real control plane built from the Go module proxy."""
