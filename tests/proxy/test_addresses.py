"""Issue 65: the banner's URL for other machines was `http://<hostname>:PORT`, and the hostname resolved to
127.0.0.1. It now names the addresses other machines can reach, or says that it cannot tell."""

from __future__ import annotations

import ipaddress

from ajet_proxy import addresses
from ajet_swarm.cli import banner


def test_loopback_names_are_dropped_and_the_outbound_address_kept(monkeypatch):
    monkeypatch.setattr(addresses, "_outbound_address", lambda: "10.1.2.3")
    monkeypatch.setattr(
        addresses, "_named_addresses", lambda: ["127.0.1.1", "10.1.2.3", "::1", "fe80::1%eth0", "2001:db8::5"]
    )
    assert addresses.reachable_addresses() == ["10.1.2.3", "2001:db8::5"]
    assert addresses.client_urls("0.0.0.0", 10086) == ["http://10.1.2.3:10086", "http://[2001:db8::5]:10086"]
    assert "other machines use http://10.1.2.3:10086 or" in banner("0.0.0.0", 10086, True, "s")


def test_a_machine_known_only_to_itself_says_it_cannot_tell(monkeypatch):
    monkeypatch.setattr(addresses, "_outbound_address", lambda: None)
    monkeypatch.setattr(addresses, "_named_addresses", lambda: ["127.0.0.1"])
    text = banner("0.0.0.0", 10086, True, "s")
    assert "could not be found" in text and "127.0.0.1:10086" in text  # this machine's own URL only
    assert addresses.first_client_url("0.0.0.0", 10086) == "http://127.0.0.1:10086"


def test_one_interface_is_named_as_given_and_this_machine_names_no_loopback_for_others():
    assert addresses.client_urls("192.0.2.7", 5) == ["http://192.0.2.7:5"]
    for url in addresses.client_urls("0.0.0.0", 5):  # the real resolvers of this machine
        host = url.split("//")[1].rsplit(":", 1)[0].strip("[]")
        assert not ipaddress.ip_address(host).is_loopback, url
