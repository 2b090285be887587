"""Per-object fit (placeholder; being built)."""


def fit_skinning(*a, **k):
    raise NotImplementedError
