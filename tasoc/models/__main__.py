"""`python -m tasoc.models`: print the zoo's op/parameter table for `docs/models.md`."""

from tasoc.models import stats_table

print(stats_table())
