"""`tessera sim`: trace replay capacity planner (Alibaba GPU trace format) over the production
allocation code. May import `tessera.alloc` and `tessera.model` only.
"""
