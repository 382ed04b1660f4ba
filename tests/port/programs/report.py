"""`@env.task(report=True)`: HTML logged to the main tab and to a named tab, from an async task
(the `.aio` forms) and from a sync one (`replace` swaps the main tab's content)."""

import shoal as flyte
import shoal.report

env = flyte.TaskEnvironment(name="port_report")


@env.task(report=True)
async def summarize(values: list[int]) -> int:
    total = sum(values)
    await flyte.report.log.aio(f"<h1>port-report-main total={total}</h1>")
    tab = flyte.report.get_tab("Details")
    tab.log("<p>port-report-details-tab</p>")
    await flyte.report.flush.aio()
    return total


@env.task(report=True)
def sync_summary(values: list[int]) -> int:
    flyte.report.log("<p>port-report-replaced-away</p>")
    flyte.report.replace(f"<p>port-report-replacement max={max(values)}</p>")
    flyte.report.flush()
    return max(values)


if __name__ == "__main__":
    flyte.init_from_config()
    first = flyte.run(summarize, values=[1, 2, 3, 4])
    first.wait()
    second = flyte.run(sync_summary, values=[3, 9, 4])
    second.wait()
    print(f"RESULT runs {first.name} {second.name}")
    print(f"RESULT outputs {first.outputs()} {second.outputs()}")
