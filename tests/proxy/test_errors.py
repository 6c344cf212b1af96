"""The one error tree: every error the proxy, the store and the engines raise is a class of `ajet.errors`, answered
by its code in one place (`ajet_proxy.errors`) and raised again by the SDK as the class of that code."""

import pytest

import ajet.errors
import ajet_store
from ajet.errors import (
    EngineUnavailable,
    EpisodeConflict,
    EpisodeNotFound,
    InvalidRequest,
    NotReady,
    StoreError,
    StoreUnavailable,
    SwarmError,
    TrainerUnresponsive,
    Unauthorized,
    WrongState,
    error_for,
)
from ajet.protocol import ErrorCode
from ajet_proxy import errors as px


@pytest.mark.parametrize(
    "exc,code,status,sdk_cls",
    [
        (EpisodeNotFound("no episode x"), ErrorCode.EPISODE_NOT_FOUND, 404, EpisodeNotFound),
        (EpisodeConflict("already ended"), ErrorCode.EPISODE_CONFLICT, 409, EpisodeConflict),
        (WrongState("not OFFLINE", state="ROLLING"), ErrorCode.WRONG_STATE, 409, WrongState),
        (NotReady("the experiment is BOOTING", state="BOOTING"), ErrorCode.NOT_READY, 503, NotReady),
        (ajet_store.SchemaMismatch("version 2"), ErrorCode.STORE_ERROR, 500, StoreError),
        (ajet_store.AlreadyConsumed("step 3"), ErrorCode.STORE_ERROR, 500, StoreError),
        (ajet_store.StoreUnavailable("cannot read"), ErrorCode.STORE_UNAVAILABLE, 503, StoreUnavailable),
        (ajet_store.StoreWriteFailed("disk full"), ErrorCode.STORE_UNAVAILABLE, 503, StoreUnavailable),
        (ajet_store.StoreRefusedValue("value too long"), ErrorCode.INVALID_REQUEST, 422, InvalidRequest),
        (
            TrainerUnresponsive("no heartbeat", state="ROLLING"),
            ErrorCode.TRAINER_UNRESPONSIVE,
            503,
            TrainerUnresponsive,
        ),
        (Unauthorized("bad key"), ErrorCode.UNAUTHORIZED, 401, Unauthorized),
        (InvalidRequest.for_field("n", "only 1"), ErrorCode.INVALID_REQUEST, 422, InvalidRequest),
        (EngineUnavailable("no engine"), ErrorCode.ENGINE_UNAVAILABLE, 503, EngineUnavailable),
    ],
)
def test_every_error_maps_once(exc, code, status, sdk_cls):
    err = px.http_error(exc)
    assert (err.code, err.status, err.detail) == (code, status, exc.detail)
    assert err.state == exc.state and err.fields == exc.fields
    if code.retry_after:
        assert err.headers == {"Retry-After": str(code.retry_after)}
    else:
        assert err.headers is None
    back = error_for(err.status, err.code.value, err.detail, err.state, err.fields)
    assert type(back) is sdk_cls and back.code == code and back.fields == exc.fields


def test_each_code_has_exactly_one_class_and_every_server_class_is_in_the_tree():
    wire = {c for c in vars(ajet.errors).values() if isinstance(c, type) and issubclass(c, SwarmError)}
    assert {code for code in ErrorCode} == {c.code for c in wire}  # every code answered has a class
    store_own = {c for c in vars(ajet_store).values() if isinstance(c, type) and issubclass(c, ajet.errors.AjetError)}
    assert all(issubclass(c, StoreError) for c in store_own)  # the store's own branch has one root
    assert all(error_for(c.code.status, c.code.value, "x").code == c.code for c in wire)


def test_a_subclass_answers_as_its_code():
    class Expired(EpisodeConflict):
        pass

    assert px.http_error(Expired("gone")).code == ErrorCode.EPISODE_CONFLICT


def test_sdk_falls_back_to_the_status_for_an_unknown_code():
    assert type(error_for(409, "SomethingElse", "x")).__name__ == "Conflict"
    unknown = error_for(418, "Teapot", "x")
    assert type(unknown) is SwarmError and unknown.error == "Teapot" and unknown.status == 418
