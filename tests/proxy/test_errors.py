"""The one error boundary: every store error and every proxy error maps to the SDK's code and status."""

import pytest

import ajet_store
from ajet.errors import (
    EngineNotReady,
    EpisodeConflict,
    EpisodeNotFound,
    InvalidRequest,
    ServerStoreError,
    ServerStoreUnavailable,
    TrainerUnresponsive,
    Unauthorized,
    UpstreamUnavailable,
    WrongState,
    error_for,
)
from ajet.protocol import ErrorCode
from ajet_proxy import errors as px


@pytest.mark.parametrize(
    "exc,code,status,sdk_cls",
    [
        (ajet_store.NotFound("no episode x"), ErrorCode.EPISODE_NOT_FOUND, 404, EpisodeNotFound),
        (ajet_store.Conflict("already ended"), ErrorCode.EPISODE_CONFLICT, 409, EpisodeConflict),
        (ajet_store.WrongState("not OFFLINE", state="ROLLING"), ErrorCode.WRONG_STATE, 409, WrongState),
        (ajet_store.NotRolling("engine is BOOTING", state="BOOTING"), ErrorCode.ENGINE_NOT_READY, 503, EngineNotReady),
        (ajet_store.SchemaMismatch("version 2"), ErrorCode.STORE_ERROR, 500, ServerStoreError),
        (ajet_store.AlreadyConsumed("step 3"), ErrorCode.STORE_ERROR, 500, ServerStoreError),
        (ajet_store.StoreUnavailable("cannot read"), ErrorCode.STORE_UNAVAILABLE, 503, ServerStoreUnavailable),
        (ajet_store.StoreWriteFailed("disk full"), ErrorCode.STORE_UNAVAILABLE, 503, ServerStoreUnavailable),
        (ajet_store.StoreRefusedValue("value too long"), ErrorCode.INVALID_REQUEST, 422, InvalidRequest),
        (
            ajet_store.TrainerSilent("no heartbeat", state="ROLLING"),
            ErrorCode.TRAINER_UNRESPONSIVE,
            503,
            TrainerUnresponsive,
        ),  # fmt: skip
        (px.Unauthorized("bad key"), ErrorCode.UNAUTHORIZED, 401, Unauthorized),
        (px.InvalidRequest("n: only 1", fields=["n"]), ErrorCode.INVALID_REQUEST, 422, InvalidRequest),
        (px.EngineNotReady("OFFLINE"), ErrorCode.ENGINE_NOT_READY, 503, EngineNotReady),
        (px.UpstreamUnavailable("no deployment"), ErrorCode.UPSTREAM_UNAVAILABLE, 503, UpstreamUnavailable),
    ],
)
def test_every_error_maps_once(exc, code, status, sdk_cls):
    err = px.http_error(exc)
    assert (err.code, err.status, err.detail) == (code, status, exc.detail)
    assert err.state == exc.state
    if code.retry_after:
        assert err.headers == {"Retry-After": str(code.retry_after)}
    else:
        assert err.headers is None
    back = error_for(err.status, err.code.value, err.detail, err.state)
    assert type(back) is sdk_cls and back.code == code  # the SDK raises the class of the same name


def test_every_store_error_class_is_in_the_table():
    classes = {c for c in vars(ajet_store).values() if isinstance(c, type) and issubclass(c, ajet_store.StoreError)}
    assert classes - {ajet_store.StoreError} == set(px.STORE_ERROR_CODES)


def test_a_store_error_subclass_answers_as_its_base():
    class Expired(ajet_store.Conflict):
        pass

    assert px.http_error(Expired("gone")).code == ErrorCode.EPISODE_CONFLICT


def test_sdk_falls_back_to_the_status_for_an_unknown_code():
    assert type(error_for(409, "SomethingElse", "x")).__name__ == "Conflict"
    assert type(error_for(418, "Teapot", "x")).__name__ == "SwarmServerError" and error_for(418, "T", "x").code is None
