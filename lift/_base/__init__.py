"""The base every other part stands on: the types whose values hold
nothing (`atoms`), the caches' two policies (`caches`), lift's exceptions
(`errors`), the registry of `Lifted` built during a call (`registry`) and
garbage collection held off (`gc`), whose code is the user's (`owners`). Imports nothing of lift's."""
