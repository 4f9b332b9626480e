"""``engramdb serve``: the long-running process by role, its clean stop and its start-up heap."""
