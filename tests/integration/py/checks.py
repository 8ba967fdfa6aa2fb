"""Small assertions the integration tests share."""
import pytest
from pymongo.errors import OperationFailure


def code_of(fn):
    """The code of the OperationFailure fn() raises (it must raise one)."""
    with pytest.raises(OperationFailure) as ei:
        fn()
    return ei.value.code


def agg(coll, pipeline, **kw):
    """coll.aggregate(pipeline) as a list."""
    return list(coll.aggregate(pipeline, **kw))
