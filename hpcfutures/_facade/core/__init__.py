"""The executor's engine: calls become groups (batching), groups Dask tasks
(sending), their ends futures' results (completions), lost work is sent again
(recovery).  Below every other room of the facade."""
