"""Dataset definitions the tests share: one name each, instead of the same YAML in every file."""

from __future__ import annotations

from pathlib import Path

DOG = """\
petstore.Dog:
  properties: {name: {type: string}}
"""
"""One object schema with one property: the smallest dataset."""

DOG_AGE = """\
petstore.Dog:
  properties: {name: {type: string}, age: {type: integer}}
"""
"""A string and an integer property: type checks, PATCH of one column."""

DOG_CAT = """\
petstore.Dog:
  properties: {name: {type: string}}
petstore.Cat:
  properties: {name: {type: string}}
"""
"""Two object schemas: transactions that write two tables."""

SHOP = """\
shop.Customer:
  properties:
    name: {type: string}
    balance: {type: number}
    sourcePosition: {type: string}
  watermark: [sourcePosition]
shop.Order:
  properties:
    customerId: {type: integer}
    amount: {type: number}
    sourcePosition: {type: string}
  watermark: [sourcePosition]
"""
"""Two tables a change feed fills (a Debezium connector's customers and orders): the source
position of each row's last change is its watermark."""

SHOP_MARIADB = """\
shop.Customer:
  properties:
    name: {type: string}
    balance: {type: decimal, precision: 12, scale: 2}
    tier: {type: string}
    born: {type: date}
    since: {type: datetime}
    seen: {type: timestamp}
    profile: {type: string}
    sourcePosition: {type: string}
  watermark: [sourcePosition]
shop.Order:
  properties:
    customerId: {type: integer}
    amount: {type: decimal, precision: 10, scale: 2}
    placed: {type: datetime}
    status: {type: string}
    sourcePosition: {type: string}
  watermark: [sourcePosition]
"""
"""SHOP with MariaDB's types (tests/integration/test_debezium_mariadb.py): DECIMAL(p,s) → decimal
of the same size,
ENUM → string, DATE → date, DATETIME → datetime, TIMESTAMP → timestamp, JSON → string (its
text)."""

DOG_AGE_CAT = """\
petstore.Dog:
  properties: {name: {type: string}, age: {type: integer}}
petstore.Cat:
  properties: {name: {type: string}}
"""
"""Two object schemas, the first with an integer property."""

DOG_CAT_TABLES = {
    "Dog": ("petstore", "petstore", "Dog"),
    "Dog tombstones": ("petstore", "_tombstones", "petstore", "Dog"),
    "Dog history": ("petstore", "_history", "petstore", "Dog"),
    "Cat": ("petstore", "petstore", "Cat"),
    "Cat tombstones": ("petstore", "_tombstones", "petstore", "Cat"),
    "Cat history": ("petstore", "_history", "petstore", "Cat"),
    "ledger": ("_system", "transactions"),
    "outcomes": ("_system", "outcomes"),
    "quarantine": ("_system", "quarantine"),
}
"""Every table a DOG_CAT warehouse holds: name → path parts under the warehouse."""

PETSTORE = Path(__file__).resolve().parents[2] / "streaming" / "resources" / "petstore.yaml"
"""The petstore dataset the package ships (seed 000's schemas, queries and views)."""
