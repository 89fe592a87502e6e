"""The endpoint's HTTP app on the fake backend (no replicas, no lifespan): the token in either
header, lakescore errors with their own status, and the endpoint's own 500 on operator routes."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from test_endpoint import fake_endpoint

from lakescore.errors import CertificateError, UncertifiedModelError
from lakescore.serving.endpoint_app import create_endpoint_app

TOKEN = "s3cret-token"


class Client:
    """Requests to the app in this process (httpx's ASGI transport; the lifespan does not run)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        async def send() -> httpx.Response:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://ep") as c:
                return await c.request(method, path, **kwargs)

        return asyncio.run(send())

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", path, **kwargs)


@pytest.fixture()
def app_and_endpoint(tmp_path):  # type: ignore[no-untyped-def]
    ep, _, state = fake_endpoint(tmp_path)
    try:
        yield Client(create_endpoint_app(ep, token=TOKEN, state=state, address="http://127.0.0.1:1")), ep
    finally:
        state.close()


def test_the_token_is_read_from_authorization_or_x_lakescore_token(app_and_endpoint) -> None:
    client, _ = app_and_endpoint
    accepted = [{"Authorization": f"Bearer {TOKEN}"},
                {"Authorization": "Bearer workspace-token-for-the-driver-proxy", "X-Lakescore-Token": TOKEN},
                {"X-Lakescore-Token": f" {TOKEN} "}]
    refused = [{}, {"Authorization": f"Basic {TOKEN}"}, {"Authorization": "Bearer wrong"},
               {"Authorization": f"Bearer {TOKEN}", "X-Lakescore-Token": "wrong"},  # the named header decides
               {"Authorization": "Bearer workspace-token-for-the-driver-proxy"}]
    for headers in accepted:
        resp = client.get("/status", headers=headers)
        assert resp.status_code == 200, headers
        assert (resp.json()["endpoint"], resp.json()["address"]) == ("ep", "http://127.0.0.1:1")
    for headers in refused:
        for method, path in (("GET", "/status"), ("POST", "/invocations"), ("POST", "/deploy")):
            resp = client.request(method, path, headers=headers, json={"version": 2})
            assert resp.status_code == 401, (method, path, headers)
            assert resp.json()["error_code"] == "unauthorized"
            assert "X-Lakescore-Token: <token>" in resp.json()["message"]


@pytest.mark.parametrize(("error", "status", "code"), [
    (UncertifiedModelError("models:/m/2 has no certificate; admit it with lakescore train"), 409, "uncertified_model"),
    (CertificateError("models:/m/2: the artifact differs from its certificate; retrain it"), 422,
     "certificate_mismatch"),
])
def test_a_deploy_of_an_unadmitted_version_is_refused_with_4xx(app_and_endpoint, error, status, code) -> None:
    client, ep = app_and_endpoint

    async def refuse(version: int) -> dict:
        raise error

    ep.deploy = refuse
    resp = client.post("/deploy", headers={"Authorization": f"Bearer {TOKEN}"}, json={"version": 2})
    assert (resp.status_code, resp.json()["error_code"], resp.json()["message"]) == (status, code, str(error))


def test_other_failures_of_operator_routes_are_the_endpoint_s_own_500(app_and_endpoint) -> None:
    client, ep = app_and_endpoint

    async def time_out(version: int) -> dict:
        raise TimeoutError("registry read took over 30 s")

    ep.deploy = time_out
    headers = {"Authorization": f"Bearer {TOKEN}"}
    resp = client.post("/deploy", headers=headers, json={"version": 2})
    assert resp.status_code == 500 and resp.json()["error_code"] == "endpoint_action_failed"
    assert resp.json()["message"].startswith("POST /deploy on endpoint ep failed: TimeoutError: registry read "
                                             "took over 30 s. The endpoint keeps serving v1;")
    assert "input rows" not in resp.json()["message"]
    bad = client.post("/deploy", headers=headers, json={"version": "two"})  # a lakescore error keeps its 400
    assert (bad.status_code, bad.json()["error_code"]) == (400, "invalid_request")
