"""The shop programs' tool data and tool bodies: deterministic, standard library only.

A small online shop as a retail support desk sees it: orders with their items, the
customers' order lists and the products' variants. The tools answer in JSON, as retail
APIs do (a list of records, records nested inside an order), unlike the corpus tools'
prose; the names, ids and prices are made up, so that a model has to call the tools.
`shop_tasks.py` writes the tasks (`../shop_tasks.jsonl`) from the same data.
"""

from __future__ import annotations

import json

__all__ = [
    "ORDERS",
    "PRODUCTS",
    "customer_orders",
    "order_details",
    "order_total",
    "product_variants",
]

ORDERS: dict[str, dict[str, object]] = {
    "#W2611340": {
        "customer": "Mia Chen",
        "status": "delivered",
        "items": [
            {"name": "Water Bottle", "item_id": "6469567736", "price": 47.84},
            {"name": "Office Chair", "item_id": "8426249116", "price": 488.81},
        ],
        "payment_method": "credit_card_7815",
    },
    "#W4817420": {
        "customer": "Mia Chen",
        "status": "pending",
        "items": [
            {"name": "Desk Lamp", "item_id": "5320792178", "price": 153.23},
            {"name": "Wireless Earbuds", "item_id": "3694871183", "price": 92.75},
            {"name": "Yoga Mat", "item_id": "2733768059", "price": 31.99},
        ],
        "payment_method": "paypal_2076",
    },
    "#W5931168": {
        "customer": "Omar Haddad",
        "status": "delivered",
        "items": [
            {"name": "Hiking Boots", "item_id": "8106223139", "price": 210.65},
            {"name": "Backpack", "item_id": "5917587651", "price": 74.1},
        ],
        "payment_method": "gift_card_3512",
    },
    "#W7003517": {
        "customer": "Omar Haddad",
        "status": "cancelled",
        "items": [{"name": "Coffee Maker", "item_id": "3020722515", "price": 129.99}],
        "payment_method": "gift_card_3512",
    },
    "#W8216604": {
        "customer": "Lena Park",
        "status": "processed",
        "items": [
            {"name": "Mechanical Keyboard", "item_id": "1151293680", "price": 236.51},
            {"name": "Gaming Mouse", "item_id": "5796612084", "price": 58.4},
            {"name": "Monitor Stand", "item_id": "4579334072", "price": 44.95},
        ],
        "payment_method": "credit_card_4466",
    },
    "#W3390811": {
        "customer": "Lena Park",
        "status": "delivered",
        "items": [
            {"name": "Running Shoes", "item_id": "9791469541", "price": 119.0},
            {"name": "Sports Socks", "item_id": "1262139877", "price": 12.49},
        ],
        "payment_method": "credit_card_4466",
    },
    "#W6102755": {
        "customer": "Jonas Weber",
        "status": "delivered",
        "items": [
            {"name": "Electric Kettle", "item_id": "2243454707", "price": 64.5},
            {"name": "Tea Set", "item_id": "7154215719", "price": 38.2},
            {"name": "Cutting Board", "item_id": "6130713659", "price": 27.35},
        ],
        "payment_method": "paypal_9105",
    },
    "#W9447013": {
        "customer": "Jonas Weber",
        "status": "pending",
        "items": [
            {"name": "Air Purifier", "item_id": "9534205511", "price": 289.0},
            {"name": "Replacement Filter", "item_id": "8997165024", "price": 39.99},
        ],
        "payment_method": "paypal_9105",
    },
}

PRODUCTS: dict[str, list[dict[str, object]]] = {
    "T-Shirt": [
        {"item_id": "9612497925", "color": "blue", "size": "M", "price": 50.88, "stock": 12},
        {"item_id": "8124970213", "color": "red", "size": "M", "price": 49.67, "stock": 0},
        {"item_id": "3799046073", "color": "black", "size": "L", "price": 53.27, "stock": 4},
        {"item_id": "5253880258", "color": "white", "size": "S", "price": 47.1, "stock": 9},
    ],
    "Desk Lamp": [
        {"item_id": "5320792178", "color": "black", "size": "large", "price": 153.23, "stock": 3},
        {"item_id": "1569765161", "color": "silver", "size": "small", "price": 143.02, "stock": 7},
        {"item_id": "7624783998", "color": "white", "size": "medium", "price": 154.17, "stock": 0},
    ],
    "Running Shoes": [
        {"item_id": "9791469541", "color": "yellow", "size": "9", "price": 119.0, "stock": 5},
        {"item_id": "4107812777", "color": "black", "size": "10", "price": 128.36, "stock": 2},
        {"item_id": "1775591963", "color": "white", "size": "10", "price": 111.2, "stock": 6},
    ],
    "Backpack": [
        {"item_id": "5917587651", "color": "grey", "size": "medium", "price": 74.1, "stock": 8},
        {"item_id": "8030558068", "color": "black", "size": "large", "price": 86.8, "stock": 1},
        {"item_id": "7251508981", "color": "green", "size": "small", "price": 65.35, "stock": 0},
    ],
    "Electric Kettle": [
        {"item_id": "2243454707", "color": "white", "size": "1.5L", "price": 64.5, "stock": 11},
        {"item_id": "9335834276", "color": "glass", "size": "2L", "price": 72.95, "stock": 4},
        {"item_id": "3015420423", "color": "silver", "size": "1L", "price": 59.9, "stock": 2},
    ],
}


def _find(table: dict[str, object], key: str) -> str | None:
    wanted = key.strip().lstrip("#").casefold()
    for name in table:
        if name.lstrip("#").casefold() == wanted:
            return name
    return None


def order_total(order_id: str) -> float:
    """The sum of an order's item prices."""
    items = ORDERS[order_id]["items"]
    assert isinstance(items, list)
    return round(sum(float(item["price"]) for item in items), 2)


def order_details(order_id: str) -> str:
    """An order's status, items (name, item id, price) and payment method, as JSON.

    Args:
        order_id: the order's id, e.g. #W2611340
    """
    found = _find(dict(ORDERS), order_id)
    if found is None:
        return json.dumps({"error": f"no order {order_id!r}"})
    return json.dumps({"order_id": found, **ORDERS[found]})


def customer_orders(customer: str) -> str:
    """A customer's orders (id, status and total), as JSON.

    Args:
        customer: the customer's full name, e.g. Mia Chen
    """
    wanted = customer.strip().casefold()
    orders = [
        {"order_id": order_id, "status": order["status"], "total": order_total(order_id)}
        for order_id, order in ORDERS.items()
        if str(order["customer"]).casefold() == wanted
    ]
    if not orders:
        known = sorted({str(order["customer"]) for order in ORDERS.values()})
        return json.dumps({"error": f"no customer {customer!r}", "customers": known})
    return json.dumps(orders)


def product_variants(product: str) -> str:
    """A product's variants (item id, color, size, price, units in stock), as JSON.

    Args:
        product: the product's name, e.g. T-Shirt
    """
    found = _find(dict(PRODUCTS), product)
    if found is None:
        return json.dumps({"error": f"no product {product!r}", "products": sorted(PRODUCTS)})
    return json.dumps(PRODUCTS[found])
