"""Write `shop_tasks.jsonl`: the shop programs' tasks, with exact answers computed from
the shop tools' own data (`programs/shop_tools.py`).

    python data/corpus/shop_tasks.py      # rewrites data/corpus/shop_tasks.jsonl

Kinds: `price` (an item of an order), `total` (an order's total), `refund` (two items
returned), `largest` (a customer's order with the highest total), `cheapest` (a
product's cheapest variant in stock), `spread` (a product's dearest variant less its
cheapest).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "programs"))

from shop_tools import ORDERS, PRODUCTS, order_total


def _money(value: float) -> str:
    return f"{round(value, 2):g}"


def tasks() -> list[dict[str, str]]:
    out: list[dict[str, str]] = []

    def add(kind: str, task: str, answer: str) -> None:
        out.append({"id": f"{kind}-{sum(t['kind'] == kind for t in out) + 1:02d}",
                    "task": task, "answer": answer, "kind": kind})  # fmt: skip

    for order_id, order in ORDERS.items():
        items = order["items"]
        assert isinstance(items, list)
        for item in items:
            add("price", f"What did the {item['name']} in order {order_id} cost?",
                _money(float(item["price"])))  # fmt: skip
    for order_id in ORDERS:
        add("total", f"What is the total of order {order_id}?", _money(order_total(order_id)))
    for order_id, order in ORDERS.items():
        items = order["items"]
        assert isinstance(items, list)
        if len(items) >= 2:
            first, second = items[-2], items[-1]
            refund = float(first["price"]) + float(second["price"])
            add("refund", f"How much is refunded if I return the {first['name']} and the"
                f" {second['name']} from order {order_id}?", _money(refund))  # fmt: skip
    customers = sorted({str(order["customer"]) for order in ORDERS.values()})
    for customer in customers:
        mine = [order_id for order_id, order in ORDERS.items() if order["customer"] == customer]
        best = max(mine, key=order_total)
        add("largest", f"Which of {customer}'s orders has the highest total? Answer with the"
            " order id.", best)  # fmt: skip
    for product, variants in PRODUCTS.items():
        stocked = [v for v in variants if int(str(v["stock"])) > 0]
        cheapest = min(stocked, key=lambda v: float(str(v["price"])))
        add("cheapest", f"What is the item id of the cheapest {product} variant in stock?",
            str(cheapest["item_id"]))  # fmt: skip
    for product, variants in PRODUCTS.items():
        prices = [float(str(v["price"])) for v in variants]
        add("spread", f"How much more does the most expensive {product} variant cost than the"
            " cheapest one?", _money(max(prices) - min(prices)))  # fmt: skip
    return out


def main() -> None:
    path = Path(__file__).parent / "shop_tasks.jsonl"
    with path.open("w") as handle:
        for task in tasks():
            handle.write(json.dumps(task) + "\n")
    print(f"{path}: {len(tasks())} tasks")


if __name__ == "__main__":
    main()
