#!/usr/bin/env python3
"""Turns the x509-limbo path-validation suite (github.com/C2SP/x509-limbo) into cases the TLS tests
serve with `openssl s_server`, and gives OpenSSL's own verdict on each beside them.

    git clone https://github.com/C2SP/x509-limbo /tmp/x509-limbo          # not part of the repository
    Scripts/x509-limbo.py compile /tmp/x509-limbo /tmp/limbo.json          # the suite's own generator
    Scripts/x509-limbo.py cases /tmp/limbo.json /tmp/limbo-cases
    SOCKETSTREAMS_X509_LIMBO=/tmp/limbo-cases swift test -Xswiftc -DSOCKETSTREAMS_X509_LIMBO --filter X509LimboTests

`compile` runs the suite's generator from a checkout (its `limbo.json` is kept out of Git; the generator
needs pydantic and cryptography, and a case it cannot build with the installed cryptography is left out
and named). `cases` keeps the server-validation cases whose leaf has a private key (a handshake needs
one) and writes, per case, what Scripts/make-tls-corpus.py writes (leaf.pem, leaf.key, chain.pem with
the untrusted intermediates in the suite's order, root.pem with the trusted certificates, crl.pem) and
DIRECTORY/cases.json: {name, host, isAddress, expected ("accept" or "reject"), time (Unix seconds or
null), maximumDepth, hasChain, hasCRL, features, openssl ("accept" or "reject": `openssl verify`
with the same roots, intermediates, name, time, CRLs and depth, purpose sslserver)}.
"""

import datetime
import json
import os
import subprocess
import sys


def compile_suite(checkout, output):
    sys.path.insert(0, checkout)
    from limbo import testcases  # noqa: E402  (the checkout's package)
    from limbo.models import Limbo  # noqa: E402

    cases = []
    for name, make in testcases.registry.items():
        try:
            cases.append(make())
        except Exception as error:  # a case this cryptography cannot build
            print(f"left out {name}: {type(error).__name__}: {error}", file=sys.stderr)
    with open(output, "w") as handle:
        handle.write(Limbo(version=1, testcases=cases).model_dump_json(indent=1))
    print(f"{len(cases)} cases in {output}")


def openssl_verdict(directory, case, host, is_address, time):
    command = ["openssl", "verify", "-purpose", "sslserver", "-CAfile", os.path.join(directory, "root.pem")]
    if case["untrusted_intermediates"]:
        command += ["-untrusted", os.path.join(directory, "chain.pem")]
    if host is not None:
        command += ["-verify_ip" if is_address else "-verify_hostname", host]
    if time is not None:
        command += ["-attime", str(time)]
    if case["crls"]:
        command += ["-crl_check", "-CRLfile", os.path.join(directory, "crl.pem")]
    if case["max_chain_depth"] is not None:
        command += ["-verify_depth", str(case["max_chain_depth"])]
    command.append(os.path.join(directory, "leaf.pem"))
    result = subprocess.run(command, capture_output=True, text=True)
    return "accept" if result.returncode == 0 else "reject"


def make_cases(suite_path, output):
    suite = json.load(open(suite_path))
    cases = []
    for case in suite["testcases"]:
        if case["validation_kind"] != "SERVER" or not case["peer_certificate_key"]:
            continue
        name = case["id"].replace("::", "--")
        directory = os.path.join(output, name)
        os.makedirs(directory, exist_ok=True)

        def write(file, text):
            with open(os.path.join(directory, file), "w") as handle:
                handle.write(text)

        write("leaf.pem", case["peer_certificate"])
        write("leaf.key", case["peer_certificate_key"])
        write("chain.pem", "".join(case["untrusted_intermediates"]))
        write("root.pem", "".join(case["trusted_certs"]))
        if case["crls"]:
            write("crl.pem", "".join(case["crls"]))
        peer = case["expected_peer_name"]
        host = peer["value"] if peer else None
        is_address = bool(peer) and peer["kind"] == "IP"
        time = None
        if case["validation_time"]:
            time = int(datetime.datetime.fromisoformat(case["validation_time"].replace("Z", "+00:00")).timestamp())
        cases.append({
            "name": name, "host": host, "isAddress": is_address,
            "expected": "accept" if case["expected_result"] == "SUCCESS" else "reject",
            "time": time, "maximumDepth": case["max_chain_depth"], "hasChain": bool(case["untrusted_intermediates"]),
            "hasCRL": bool(case["crls"]), "features": case["features"] or [],
            "openssl": openssl_verdict(directory, case, host, is_address, time),
        })
    with open(os.path.join(output, "cases.json"), "w") as handle:
        json.dump(cases, handle, indent=1)
    right = sum(1 for case in cases if case["openssl"] == case["expected"])
    print(f"{len(cases)} cases in {output}; openssl verify right on {right}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "compile":
        compile_suite(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "cases":
        make_cases(sys.argv[2], sys.argv[3])
    else:
        sys.exit("usage: x509-limbo.py compile CHECKOUT OUTPUT.json | x509-limbo.py cases SUITE.json DIRECTORY")
