"""The `tasoc` command (`tasoc.driver.main:main`): opt, run and zoo.

The run report that passes write to is `tasoc.passes.report`; it is re-exported here
for convenience.
"""

from tasoc.passes.report import PassRecord, RunReport, current_report, reporting

__all__ = ["PassRecord", "RunReport", "current_report", "reporting"]
