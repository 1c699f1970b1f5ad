"""Every operation of the spec has a method in the client."""

from warden import _types
from warden.client import COVERED


def test_every_operation_is_covered() -> None:
    missing = sorted(set(_types.OPERATIONS) - COVERED)
    assert not missing, f"operations of spec/openapi.yaml without a method in sdk/python: {missing}"
    unknown = sorted(COVERED - set(_types.OPERATIONS))
    assert not unknown, f"methods tagged with operations the spec lacks: {unknown}"


def test_error_classes_cover_every_code() -> None:
    from warden.errors import _BY_CODE
    assert set(_types.ERROR_STATUS) <= set(_BY_CODE)
