"""Pydantic models and str enums as task inputs and outputs, rebuilt as their own classes on
the other side."""

import enum
from enum import StrEnum

from pydantic import BaseModel

import shoal as flyte

env = flyte.TaskEnvironment(name="port_pydantic")


class Color(str, enum.Enum):
    RED = "red"
    GREEN = "green"


class Size(StrEnum):
    SMALL = "s"
    LARGE = "l"


class Order(BaseModel):
    item: str
    color: Color
    size: Size
    quantity: int


class Quote(BaseModel):
    item: str
    color: Color
    total_cents: int


@env.task
async def complement(color: Color) -> Color:
    return Color.GREEN if color is Color.RED else Color.RED


@env.task
async def quote(order: Order) -> Quote:
    unit = 1250 if order.size is Size.LARGE else 1000
    return Quote(item=order.item, color=order.color, total_cents=unit * order.quantity)


@env.task
async def main(order: Order) -> str:
    q = await quote(order)
    other = await complement(q.color)
    kinds = f"{type(q).__name__}/{type(q.color).__name__}/{type(other).__name__}"
    return f"{q.item} {q.total_cents} {q.color.value}->{other.value} {kinds}"


if __name__ == "__main__":
    flyte.init_from_config()
    order = Order(item="shirt", color=Color.RED, size=Size.LARGE, quantity=3)
    run = flyte.run(main, order=order)
    run.wait()
    print(f"RESULT main {run.outputs()}")
    direct = flyte.run(quote, order=order)
    direct.wait()
    print(f"RESULT quote {direct.outputs()}")
