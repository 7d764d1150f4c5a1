// Intentionally empty: the shims are header-only.
