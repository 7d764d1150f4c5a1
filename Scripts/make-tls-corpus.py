#!/usr/bin/env python3
"""Makes the certificate-verification corpus the TLS tests serve with `openssl s_server`.

    Scripts/make-tls-corpus.py DIRECTORY

Writes one directory per case (leaf.pem, leaf.key, chain.pem with the intermediates the server sends,
root.pem to trust, crl.pem when the case has CRLs) and DIRECTORY/cases.json, a list of
{name, rule, host, expected ("accept" or "reject"), settings, streamGet, openssl}. `settings` are the
TLSSettings the client uses beyond trusting root.pem; `streamGet` is false for cases stream-get has
no option for; `openssl` is the verdict of OpenSSL's defaults (`openssl verify`, purpose sslserver,
with the case's roots, intermediates, name, CRLs, depth and time). Everything is made fresh on each run with Python's `cryptography` (Debian:
python3-cryptography); nothing here is key material kept anywhere.
"""

import datetime
import ipaddress
import json
import os
import subprocess
import sys

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

NOW = datetime.datetime.utcnow().replace(microsecond=0)
DAY = datetime.timedelta(days=1)
VALID = (NOW - DAY, NOW + 30 * DAY)
EXPIRED = (NOW - 30 * DAY, NOW - 2 * DAY)
FUTURE = (NOW + 2 * DAY, NOW + 30 * DAY)


def key():
    return ec.generate_private_key(ec.SECP256R1())


def name(common_name):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]) if common_name else x509.Name([])


class Cert:
    """A certificate and its key."""

    def __init__(self, certificate, private_key):
        self.certificate = certificate
        self.key = private_key

    def pem(self):
        return self.certificate.public_bytes(serialization.Encoding.PEM)


def key_usage(cert_sign=False, digital_signature=True):
    return x509.KeyUsage(
        digital_signature=digital_signature, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=cert_sign, crl_sign=cert_sign,
        encipher_only=False, decipher_only=False)


def make(subject, issuer=None, ca=False, dates=VALID, san=None, san_critical=False, bc="default",
         bc_critical=True, ku="default", ski=True, aki=True, eku="default", constraints=None,
         path_length=None, signing_key=None, extra=None, private_key=None, eku_critical=False):
    """A certificate for `subject` signed by `issuer` (self-signed when None). `san`: DNS names
    (str) and IP addresses (ipaddress objects). "default" picks what a conforming CA writes."""
    private_key = private_key or key()
    issuer_name = issuer.certificate.subject if issuer else name(subject)
    issuer_key = signing_key or (issuer.key if issuer else private_key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name(subject))
        .issuer_name(issuer_name)
        .public_key(private_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(dates[0])
        .not_valid_after(dates[1])
    )
    if bc == "default":
        bc = True
    if bc:
        builder = builder.add_extension(x509.BasicConstraints(ca=ca, path_length=path_length if ca else None), critical=bc_critical)
    if ku == "default":
        ku = key_usage(cert_sign=True, digital_signature=False) if ca else key_usage()
    if ku:
        builder = builder.add_extension(ku, critical=True)
    if eku == "default":
        eku = None if ca else [ExtendedKeyUsageOID.SERVER_AUTH]
    if eku:
        builder = builder.add_extension(x509.ExtendedKeyUsage(eku), critical=eku_critical)
    if san:
        names = [x509.IPAddress(item) if not isinstance(item, str) else x509.DNSName(item) for item in san]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=san_critical)
    if ski:
        builder = builder.add_extension(x509.SubjectKeyIdentifier.from_public_key(private_key.public_key()), critical=False)
    if aki:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False)
    if constraints is not None:
        builder = builder.add_extension(constraints, critical=True)
    if extra is not None:
        builder = builder.add_extension(extra, critical=False)
    return Cert(builder.sign(issuer_key, hashes.SHA256()), private_key)


def crl(issuer, revoked=(), dates=VALID, numbered=True):
    builder = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(issuer.certificate.subject)
        .last_update(dates[0])
        .next_update(dates[1])
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.key.public_key()), critical=False)
    )
    if numbered:
        builder = builder.add_extension(x509.CRLNumber(1), critical=False)
    for certificate in revoked:
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder()
            .serial_number(certificate.certificate.serial_number)
            .revocation_date(NOW - DAY)
            .build())
    return builder.sign(issuer.key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def dns_constraints(permitted=None, excluded=None, ip_permitted=None):
    def subtrees(names):
        return [x509.DNSName(item) for item in names] if names is not None else None
    permitted_trees = subtrees(permitted)
    if ip_permitted is not None:
        permitted_trees = (permitted_trees or []) + [x509.IPAddress(ipaddress.ip_network(item)) for item in ip_permitted]
    return x509.NameConstraints(permitted_subtrees=permitted_trees, excluded_subtrees=subtrees(excluded))


def empty_name_constraints(empty_sequences=False):
    """A nameConstraints extension with neither subtree, or with both present and empty (RFC 5280
    forbids both; the builder refuses to make them)."""
    value = b"\x30\x04\xa0\x00\xa1\x00" if empty_sequences else b"\x30\x00"
    return x509.UnrecognizedExtension(x509.ObjectIdentifier("2.5.29.30"), value)


def openssl_verdict(directory, host, settings, has_chain, has_crl):
    """What OpenSSL's own verification, with its defaults, says of the case."""
    def path(file):
        return os.path.join(directory, file)
    command = ["openssl", "verify", "-purpose", "sslserver", "-CAfile", path("root.pem")]
    if has_chain:
        command += ["-untrusted", path("chain.pem")]
    try:
        ipaddress.ip_address(host)
        command += ["-verify_ip", host]
    except ValueError:
        command += ["-verify_hostname", host]
    if has_crl and settings.get("crl"):
        command += ["-crl_check_all" if settings.get("crlWholeChain") else "-crl_check", "-CRLfile", path("crl.pem")]
    if "maximumDepth" in settings:
        command += ["-verify_depth", str(settings["maximumDepth"])]
    if "time" in settings:
        command += ["-attime", str(settings["time"])]
    command.append(path("leaf.pem"))
    return "accept" if subprocess.run(command, capture_output=True).returncode == 0 else "reject"


class Corpus:
    def __init__(self, directory):
        self.directory = directory
        self.cases = []
        self.root = make("Corpus Root", ca=True)
        self.intermediate = make("Corpus Intermediate", issuer=self.root, ca=True)

    def add(self, name, rule, host, expected, leaf, chain=(), root=None, settings=None, crls=(), stream_get=True):
        directory = os.path.join(self.directory, name)
        os.makedirs(directory, exist_ok=True)

        def write(file, data):
            with open(os.path.join(directory, file), "wb") as handle:
                handle.write(data)

        write("leaf.pem", leaf.pem())
        write("leaf.key", leaf.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        write("chain.pem", b"".join(certificate.pem() for certificate in chain))
        roots = root if isinstance(root, (list, tuple)) else [root or self.root]
        write("root.pem", b"".join(certificate.pem() for certificate in roots))
        if crls:
            write("crl.pem", b"".join(crls))
        self.cases.append({
            "name": name, "rule": rule, "host": host, "expected": expected, "settings": settings or {},
            "hasChain": bool(chain), "hasCRL": bool(crls), "streamGet": stream_get,
            "openssl": openssl_verdict(directory, host, settings or {}, bool(chain), bool(crls)),
        })

    def leaf(self, host="www.example.com", issuer=None, **options):
        options.setdefault("san", [host])
        return make(options.pop("subject", host), issuer=issuer or self.root, **options)


def build(directory):
    corpus = Corpus(directory)
    add, leaf, root, inter = corpus.add, corpus.leaf, corpus.root, corpus.intermediate
    host = "www.example.com"

    # Baseline.
    add("baseline", "baseline", host, "accept", leaf())
    add("baseline-intermediate", "baseline", host, "accept", leaf(issuer=inter), [inter])
    add("untrusted-root", "baseline", host, "reject", leaf(issuer=make("Other Root", ca=True)))
    other = make("Forger", ca=True)
    forged = make(host, issuer=root, san=[host], signing_key=other.key)
    add("bad-signature", "baseline", host, "reject", forged)
    add("client-auth-only-eku", "baseline", host, "reject", leaf(eku=[ExtendedKeyUsageOID.CLIENT_AUTH]))
    add("hostname-case-insensitive", "baseline", host, "accept", leaf(san=["WWW.Example.COM"]))
    add("hostname-mismatch", "baseline", host, "reject", leaf(san=["other.example.com"]))

    # Wildcards: a whole left-most label only.
    add("wildcard-full-label", "wildcard", "foo.example.com", "accept", leaf(san=["*.example.com"], subject="wildcard"))
    add("wildcard-partial-prefix", "wildcard", "foo.example.com", "reject", leaf(san=["f*.example.com"], subject="partial"))
    add("wildcard-partial-suffix", "wildcard", "foo.example.com", "reject", leaf(san=["*o.example.com"], subject="partial"))
    add("wildcard-partial-middle", "wildcard", "baz.example.com", "reject", leaf(san=["b*z.example.com"], subject="partial"))
    add("wildcard-two-labels", "wildcard", "a.b.example.com", "reject", leaf(san=["*.example.com"], subject="wildcard"))
    add("wildcard-not-left-most", "wildcard", "foo.bar.example.com", "reject", leaf(san=["foo.*.example.com"], subject="w"))
    add("wildcard-bare-domain", "wildcard", "example.com", "reject", leaf(san=["*.example.com"], subject="wildcard"))
    add("wildcard-tld", "wildcard", "example.com", "reject", leaf(san=["*.com"], subject="wildcard"))

    # The subject CN is never a host name.
    add("cn-only", "no CN fallback", host, "reject", leaf(san=None, subject=host))
    add("cn-matches-san-does-not", "no CN fallback", host, "reject", leaf(san=["other.example.com"], subject=host))
    add("san-matches-cn-does-not", "no CN fallback", host, "accept", leaf(san=[host], subject="Some Server"))

    # Name constraints, against the names in the leaf and the name the client asked for.
    permits = make("NC permits example.com", issuer=root, ca=True, constraints=dns_constraints(permitted=["example.com"]))
    add("nc-permitted-inside", "name constraints", host, "accept", leaf(issuer=permits), [permits])
    add("nc-permitted-outside", "name constraints", "www.example.org", "reject",
        leaf("www.example.org", issuer=permits), [permits])
    excludes = make("NC excludes bar", issuer=root, ca=True, constraints=dns_constraints(excluded=["bar.example.com"]))
    add("nc-excluded-other-name", "name constraints", "foo.example.com", "accept", leaf("foo.example.com", issuer=excludes), [excludes])
    add("nc-excluded-name", "name constraints", "bar.example.com", "reject", leaf("bar.example.com", issuer=excludes), [excludes])
    add("nc-excluded-wildcard-excluded-host", "name constraints + wildcard", "bar.example.com", "reject",
        leaf(san=["*.example.com"], subject="wildcard", issuer=excludes), [excludes])
    add("nc-excluded-wildcard-other-host", "name constraints + wildcard", "foo.example.com", "accept",
        leaf(san=["*.example.com"], subject="wildcard", issuer=excludes), [excludes])
    permits_foo = make("NC permits foo", issuer=root, ca=True, constraints=dns_constraints(permitted=["foo.example.com"]))
    add("nc-permitted-wildcard-outside-host", "name constraints + wildcard", "bar.example.com", "reject",
        leaf(san=["*.example.com"], subject="wildcard", issuer=permits_foo), [permits_foo])
    add("nc-permitted-wildcard-inside-host", "name constraints + wildcard", "foo.example.com", "accept",
        leaf(san=["foo.example.com"], subject="foo", issuer=permits_foo), [permits_foo])
    root_excludes = make("NC Root", ca=True, constraints=dns_constraints(excluded=["bar.example.com"]))
    add("nc-root-excludes-wildcard-host", "name constraints + wildcard", "bar.example.com", "reject",
        leaf(san=["*.example.com"], subject="wildcard", issuer=root_excludes), root=root_excludes)
    ip_only = make("NC permits 10/8 only", issuer=root, ca=True, constraints=dns_constraints(ip_permitted=["10.0.0.0/8"]))
    add("nc-ip-only-dns-unconstrained", "name constraints", host, "accept", leaf(issuer=ip_only), [ip_only])

    # Malformed name constraints refuse the chain.
    empty = make("NC empty", issuer=root, ca=True, constraints=empty_name_constraints())
    add("nc-malformed-empty", "malformed name constraints", host, "reject", leaf(issuer=empty), [empty])
    empty_sequences = make("NC empty sequences", issuer=root, ca=True, constraints=empty_name_constraints(True))
    add("nc-malformed-empty-sequences", "malformed name constraints", host, "reject", leaf(issuer=empty_sequences), [empty_sequences])
    dotted = make("NC leading period", issuer=root, ca=True, constraints=dns_constraints(permitted=[".example.com"]))
    add("nc-malformed-leading-period", "malformed name constraints", host, "reject", leaf(issuer=dotted), [dotted])
    starred = make("NC wildcard base", issuer=root, ca=True, constraints=dns_constraints(permitted=["*.example.com", "example.com"]))
    add("nc-malformed-wildcard-base", "malformed name constraints", host, "reject", leaf(issuer=starred), [starred])
    doubled = make("NC doubled period", issuer=root, ca=True, constraints=dns_constraints(excluded=["bar..example.com"]))
    add("nc-malformed-excluded-empty-label", "malformed name constraints", host, "reject", leaf(issuer=doubled), [doubled])

    # A server's leaf is not a CA and carries no name constraints.
    ca_leaf = leaf(ca=True, ku=key_usage(), eku=[ExtendedKeyUsageOID.SERVER_AUTH])
    add("leaf-is-ca", "CA as leaf", host, "reject", ca_leaf)
    add("compatible-leaf-is-ca", "CA as leaf", host, "accept", ca_leaf, settings={"profile": "compatible"}, stream_get=False)
    # A CA certificate as its own server (x509-limbo's rfc5280 ca-as-leaf): without a keyUsage .compatible
    # accepts it, as Apple's trust evaluation, Chromium's verifier and Go do; with a CA's keyUsage alone
    # (keyCertSign, no digitalSignature) its key may not sign the handshake, which BoringSSL's TLS 1.3,
    # rustls and OpenSSL refuse, so every profile does.
    add("compatible-leaf-is-ca-without-key-usage", "CA as leaf", host, "accept", leaf(ca=True, ku=None),
        settings={"profile": "compatible"}, stream_get=False)
    add("compatible-leaf-is-ca-key-cert-sign-only", "CA as leaf", host, "reject", leaf(ca=True),
        settings={"profile": "compatible"}, stream_get=False)
    add("leaf-ca-false", "CA as leaf", host, "accept", leaf())
    add("leaf-without-basic-constraints", "CA as leaf", host, "accept", leaf(bc=None))
    add("leaf-with-name-constraints", "leaf with name constraints", host, "reject",
        leaf(constraints=dns_constraints(permitted=["example.com"])))

    # RFC 5280 profile (X509_V_FLAG_X509_STRICT in .strict, the default); .compatible accepts.
    compatible = {"profile": "compatible"}
    no_aki = leaf(aki=False)
    add("strict-leaf-without-aki", "strict profile", host, "reject", no_aki)
    add("compatible-leaf-without-aki", "strict profile", host, "accept", no_aki, settings=compatible, stream_get=False)
    no_ski_ca = make("Intermediate without SKI", issuer=root, ca=True, ski=False)
    no_ski_leaf = leaf(issuer=no_ski_ca)
    add("strict-ca-without-ski", "strict profile", host, "reject", no_ski_leaf, [no_ski_ca])
    add("compatible-ca-without-ski", "strict profile", host, "accept", no_ski_leaf, [no_ski_ca], settings=compatible, stream_get=False)
    soft_bc = make("Intermediate with non-critical BC", issuer=root, ca=True, bc_critical=False)
    soft_leaf = leaf(issuer=soft_bc)
    add("strict-ca-bc-not-critical", "strict profile", host, "reject", soft_leaf, [soft_bc])
    add("compatible-ca-bc-not-critical", "strict profile", host, "accept", soft_leaf, [soft_bc], settings=compatible, stream_get=False)
    no_ku = make("Intermediate without keyUsage", issuer=root, ca=True, ku=None)
    no_ku_leaf = leaf(issuer=no_ku)
    add("strict-ca-without-key-usage", "strict profile", host, "reject", no_ku_leaf, [no_ku])
    add("compatible-ca-without-key-usage", "strict profile", host, "accept", no_ku_leaf, [no_ku], settings=compatible, stream_get=False)
    signer = leaf(ku=key_usage(cert_sign=True))
    add("strict-leaf-key-cert-sign", "strict profile", host, "reject", signer)
    add("compatible-leaf-key-cert-sign", "strict profile", host, "accept", signer, settings=compatible, stream_get=False)
    anonymous = leaf(subject=None)
    add("strict-empty-subject-san-not-critical", "strict profile", host, "reject", anonymous)
    add("compatible-empty-subject-san-not-critical", "strict profile", host, "accept", anonymous, settings=compatible, stream_get=False)
    add("strict-empty-subject-san-critical", "strict profile", host, "accept", leaf(subject=None, san_critical=True))
    old_root = make("Root without keyUsage", ca=True, ku=None, bc_critical=False, ski=False)
    add("strict-root-profile-exempt", "strict profile (trust anchor exempt)", host, "accept",
        leaf(issuer=old_root), root=old_root)

    strict_san = leaf(subject="Some Server", san_critical=True)
    add("strict-san-critical-with-subject", "strict profile", host, "reject", strict_san)
    add("compatible-san-critical-with-subject", "strict profile", host, "accept", strict_san, settings=compatible, stream_get=False)

    # Extensions that cannot be decoded, and signature algorithms the Web PKI does not allow.
    aia_oid = x509.ObjectIdentifier("1.3.6.1.5.5.7.1.1")
    add("malformed-aia", "malformed extension", host, "reject", leaf(extra=x509.UnrecognizedExtension(aia_oid, b"malformed")))
    add("well-formed-aia", "malformed extension", host, "accept", leaf(extra=x509.AuthorityInformationAccess([
        x509.AccessDescription(x509.oid.AuthorityInformationAccessOID.CA_ISSUERS,
                               x509.UniformResourceIdentifier("http://ca.example.com/ca.crt"))])))
    dsa_root = make("DSA Root", ca=True, private_key=dsa.generate_private_key(2048))
    add("dsa-signed-leaf", "signature algorithm", host, "reject", leaf(issuer=dsa_root), root=dsa_root)
    rsa_root = make("RSA Root", ca=True, private_key=rsa.generate_private_key(65537, 2048))
    add("rsa-signed-leaf", "signature algorithm", host, "accept", leaf(issuer=rsa_root), root=rsa_root)

    # Basic constraints along the path (OpenSSL's defaults).
    not_ca = make("Intermediate cA=FALSE", issuer=root, ca=False, ku=key_usage(cert_sign=True), eku=None)
    add("intermediate-not-ca", "basic constraints", host, "reject", leaf(issuer=not_ca), [not_ca])
    zero = make("Intermediate pathlen 0", issuer=root, ca=True, path_length=0)
    below_zero = make("Intermediate below pathlen 0", issuer=zero, ca=True)
    add("pathlen-exceeded", "basic constraints", host, "reject", leaf(issuer=below_zero), [below_zero, zero])
    add("pathlen-respected", "basic constraints", host, "accept", leaf(issuer=zero), [zero])

    # CRLs: checked for the leaf when given.
    revoked_leaf = leaf()
    kept_leaf = leaf()
    root_crl = crl(root, revoked=[revoked_leaf])
    add("crl-not-revoked", "CRL", host, "accept", kept_leaf, settings={"crl": True}, crls=[root_crl])
    add("crl-revoked", "CRL", host, "reject", revoked_leaf, settings={"crl": True}, crls=[root_crl])
    add("crl-revoked-no-crl-given", "CRL", host, "accept", revoked_leaf)
    add("crl-without-number", "CRL", host, "reject", kept_leaf, settings={"crl": True}, crls=[crl(root, numbered=False)],
        stream_get=False)
    add("crl-expired", "CRL", host, "reject", kept_leaf, settings={"crl": True}, crls=[crl(root, dates=EXPIRED)])
    add("crl-missing-for-issuer", "CRL", host, "reject", kept_leaf, settings={"crl": True},
        crls=[crl(make("Unrelated CA", ca=True))])
    revoked_inter = make("Revoked Intermediate", issuer=root, ca=True)
    under_revoked = leaf(issuer=revoked_inter)
    chain_crls = [crl(root, revoked=[revoked_inter]), crl(revoked_inter)]
    add("crl-leaf-only-ignores-intermediate", "CRL", host, "accept", under_revoked, [revoked_inter],
        settings={"crl": True}, crls=chain_crls, stream_get=False)
    add("crl-whole-chain-revoked-intermediate", "CRL", host, "reject", under_revoked, [revoked_inter],
        settings={"crl": True, "crlWholeChain": True}, crls=chain_crls)
    add("crl-whole-chain-good", "CRL", host, "accept", leaf(issuer=inter), [inter],
        settings={"crl": True, "crlWholeChain": True}, crls=[crl(root), crl(inter)])

    # Maximum chain depth (intermediates between the leaf and the anchor).
    second = make("Corpus Second Intermediate", issuer=inter, ca=True)
    deep = leaf(issuer=second)
    add("depth-within-limit", "maximum depth", host, "accept", deep, [second, inter], settings={"maximumDepth": 2}, stream_get=False)
    add("depth-over-limit", "maximum depth", host, "reject", deep, [second, inter], settings={"maximumDepth": 1}, stream_get=False)
    add("depth-unlimited", "maximum depth", host, "accept", deep, [second, inter])
    # A self-issued certificate (the same CA's new key, signed by its old one) is not one more
    # intermediate (RFC 5280 §6.1.4 (l)); OpenSSL's depth counts it.
    rollover = make("Corpus Intermediate", issuer=inter, ca=True)
    add("depth-self-issued-within-limit", "maximum depth", host, "accept", leaf(issuer=rollover), [rollover, inter],
        settings={"maximumDepth": 1}, stream_get=False)

    # Validity, and kCFStreamSSLAllowsExpiredCertificates over the whole chain.
    expired = leaf(dates=EXPIRED)
    add("expired-leaf", "expiry", host, "reject", expired)
    add("expired-leaf-allowed", "expiry", host, "accept", expired, settings={"allowsExpired": True}, stream_get=False)
    add("not-yet-valid-leaf", "expiry", host, "reject", leaf(dates=FUTURE))
    old_inter = make("Expired Intermediate", issuer=root, ca=True, dates=EXPIRED)
    add("expired-intermediate", "expiry", host, "reject", leaf(issuer=old_inter), [old_inter])
    add("expired-intermediate-allowed", "expiry", host, "accept", leaf(issuer=old_inter), [old_inter],
        settings={"allowsExpired": True}, stream_get=False)
    expired_root = make("Expired Root", ca=True, dates=EXPIRED)
    under_expired_root = leaf(issuer=expired_root)
    add("expired-root", "expiry", host, "reject", under_expired_root, root=expired_root)
    add("expired-root-allowed-by-expired-roots", "expiry", host, "accept", under_expired_root, root=expired_root,
        settings={"allowsExpiredRoots": True}, stream_get=False)
    add("expired-root-allowed-by-expired-certificates", "expiry", host, "accept", under_expired_root, root=expired_root,
        settings={"allowsExpired": True}, stream_get=False)
    self_signed = make(host, san=[host], dates=EXPIRED, ca=False)
    add("expired-self-signed-any-root", "expiry, self-signed", host, "reject", self_signed,
        settings={"anyRoot": True}, stream_get=False)
    add("expired-self-signed-any-root-allowed", "expiry, self-signed", host, "accept", self_signed,
        settings={"anyRoot": True, "allowsExpired": True}, stream_get=False)
    add("self-signed-untrusted", "expiry, self-signed", host, "reject", make(host, san=[host]))

    # IP addresses: only iPAddress entries match an address.
    loopback = ipaddress.ip_address("127.0.0.1")
    add("ip-san", "IP address", "127.0.0.1", "accept", leaf(san=[loopback], subject="ip"))
    add("ip-san-other-address", "IP address", "127.0.0.1", "reject", leaf(san=[ipaddress.ip_address("127.0.0.2")], subject="ip"))
    add("ip-as-dns-name", "IP address", "127.0.0.1", "reject", leaf(san=["127.0.0.1"], subject="ip"))
    add("ip-in-cn-only", "IP address", "127.0.0.1", "reject", leaf(san=None, subject="127.0.0.1"))

    # IDNA: A-labels compare as plain names; a wildcard is never part of one.
    a_label = "xn--bcher-kva.example.com"
    add("idna-a-label", "IDNA", a_label, "accept", leaf(san=[a_label], subject="idna"))
    add("idna-a-label-by-wildcard", "IDNA", a_label, "accept", leaf(san=["*.example.com"], subject="idna"))
    add("idna-partial-wildcard", "IDNA", a_label, "reject", leaf(san=["xn--*.example.com"], subject="idna"))
    add("idna-a-label-mismatch", "IDNA", a_label, "reject", leaf(san=["xn--bcher-kvb.example.com"], subject="idna"))

    # Path building: the served order is a hint. Each valid chain here needs a path other than the one
    # served (or OpenSSL's single try), and is served in the awkward order.
    second_inter = make("Corpus Second Intermediate", issuer=inter, ca=True)
    add("path-intermediates-reversed", "path building", host, "accept", leaf(issuer=second_inter), [root, inter, second_inter])
    add("path-trusted-intermediate-root-served", "path building", host, "accept", leaf(issuer=inter), [root], root=inter)
    # One logical intermediate under two roots: the copy served first chains to a root nobody trusts.
    untrusted_root = make("Unknown Root", ca=True)
    shared_key = key()
    via_unknown = make("Cross-signed Intermediate", issuer=untrusted_root, ca=True, private_key=shared_key)
    via_root = make("Cross-signed Intermediate", issuer=root, ca=True, private_key=shared_key)
    cross_leaf = leaf(issuer=via_root)
    add("path-cross-signed-dead-end-first", "path building", host, "accept", cross_leaf, [via_unknown, untrusted_root, via_root])
    add("path-cross-signed-dead-end-only", "path building", host, "reject", cross_leaf, [via_unknown, untrusted_root])
    # The copy served first is under a CA whose name constraints exclude the host; the other is not.
    excluding = make("NC excludes www", issuer=root, ca=True, constraints=dns_constraints(excluded=[host]))
    other_root = make("Second Root", ca=True)
    via_excluding = make("Cross-signed Intermediate", issuer=excluding, ca=True, private_key=shared_key)
    via_other = make("Cross-signed Intermediate", issuer=other_root, ca=True, private_key=shared_key)
    add("path-cross-signed-excluded-first", "path building", host, "accept", cross_leaf, [via_excluding, excluding, via_other],
        root=[root, other_root])
    add("path-cross-signed-excluded-only", "path building", host, "reject", cross_leaf, [via_excluding, excluding],
        root=[root, other_root])
    # Both paths fail (one copy has expired, the other is under an excluding CA): the reason given is the
    # first path's, the one through the copy a trusted root issued.
    via_other_expired = make("Cross-signed Intermediate", issuer=other_root, ca=True, private_key=shared_key, dates=EXPIRED)
    add("path-cross-signed-excluded-or-expired", "path building", host, "reject", cross_leaf,
        [via_excluding, excluding, via_other_expired], root=[root, other_root])
    # CVE-2024-0567's shape: A, B and C cross-sign one another, A is also a trusted self-signed root.
    keys = {label: key() for label in "ABC"}
    ca_a = make("CA A", ca=True, private_key=keys["A"])
    cross = {}
    for subject, issuer in [("A", "B"), ("B", "C"), ("C", "A"), ("B", "A"), ("C", "B"), ("A", "C")]:
        signer = Cert(make(f"CA {issuer}", ca=True, private_key=keys[issuer]).certificate, keys[issuer])
        cross[subject + issuer] = make(f"CA {subject}", issuer=signer, ca=True, private_key=keys[subject])
    a1 = make("CA A1", issuer=Cert(ca_a.certificate, keys["A"]), ca=True)
    ring = [cross["AB"], cross["BC"], cross["CA"], cross["BA"], cross["CB"], cross["AC"]]
    add("path-cross-signed-cycle", "path building", host, "accept", leaf(issuer=a1), [a1] + ring, root=ca_a)
    add("path-cross-signed-cycle-untrusted", "path building", host, "reject", leaf(issuer=a1), [a1] + ring, root=root)

    # The CA/Browser Forum's certificate profile (verificationProfile .baselineRequirements, opt-in):
    # each chain breaks one rule that some of the four verifiers (Apple, Chromium, Go, rustls) skip, so
    # the default accepts it and the opt-in profile refuses it.
    baseline = {"profile": "baselineRequirements"}
    add("baseline-conforming", "Baseline Requirements", host, "accept", leaf(issuer=inter), [inter], settings=baseline, stream_get=False)
    rsa_2047 = make("RSA 2047 Root", ca=True, private_key=rsa.generate_private_key(65537, 2047))
    breaking = [
        ("leaf-without-eku", leaf(eku=None), [], None),
        ("leaf-any-eku", leaf(eku=[ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE]), [], None),
        ("leaf-critical-eku", leaf(eku_critical=True), [], None),
        ("leaf-underscore-dns", leaf(san=[host, "under_score.example.com"]), [], None),
        ("leaf-dns-empty-label", leaf(san=[host, ".example.com"]), [], None),
        ("leaf-dns-double-period-under-nc", leaf(issuer=permits, san=[host, "foo..example.com"]), [permits], None),
        ("leaf-dns-leading-period-under-nc", leaf(issuer=permits, san=[host, ".example.com"]), [permits], None),
        ("leaf-cn-not-in-san", leaf(subject="Some Server"), [], None),
        ("leaf-cn-case-differs", leaf(subject="WWW.example.com"), [], None),
        ("root-with-eku", None, [], make("Root with EKU", ca=True, eku=[ExtendedKeyUsageOID.SERVER_AUTH])),
        ("root-without-ski", None, [], make("Root without SKI", ca=True, ski=False)),
        ("root-bc-not-critical", None, [], make("Root with non-critical BC", ca=True, bc_critical=False)),
        ("rsa-modulus-not-whole-bytes", None, [], rsa_2047),
    ]
    soft_policy = make("Intermediate with non-critical policyConstraints", issuer=root, ca=True,
                       extra=x509.PolicyConstraints(require_explicit_policy=None, inhibit_policy_mapping=0))
    breaking.append(("policy-constraints-not-critical", leaf(issuer=soft_policy), [soft_policy], None))
    for label, certificate, chain, anchor in breaking:
        certificate = certificate or leaf(issuer=anchor)
        add(f"default-{label}", "Baseline Requirements (not by default)", host, "accept", certificate, chain, root=anchor, stream_get=False)
        add(f"baseline-{label}", "Baseline Requirements", host, "reject", certificate, chain, root=anchor, settings=baseline,
            stream_get=False)

    # A wildcard directly over a public suffix of the Public Suffix List's ICANN section (BR 3.2.2.6, as
    # Chromium holds it; Apple, Go and rustls do not): refused by .baselineRequirements only. Over a suffix
    # of the list's PRIVATE section, or over a registrable domain, it is accepted.
    over_suffix = leaf("example.co.uk", san=["*.co.uk"], subject="*.co.uk")
    add("default-leaf-wildcard-public-suffix", "Baseline Requirements (not by default)", "example.co.uk", "accept", over_suffix,
        stream_get=False)
    add("baseline-leaf-wildcard-public-suffix", "Baseline Requirements", "example.co.uk", "reject", over_suffix, settings=baseline,
        stream_get=False)
    over_private = leaf("bucket.s3.amazonaws.com", san=["*.s3.amazonaws.com"], subject="*.s3.amazonaws.com")
    add("baseline-leaf-wildcard-private-suffix", "Baseline Requirements", "bucket.s3.amazonaws.com", "accept", over_private,
        settings=baseline, stream_get=False)
    over_registrable = leaf("www.example.co.uk", san=["*.example.co.uk"], subject="*.example.co.uk")
    add("baseline-leaf-wildcard-registrable", "Baseline Requirements", "www.example.co.uk", "accept", over_registrable,
        settings=baseline, stream_get=False)

    # A hostile mesh: eight CAs, each cross-signed by every other (56 certificates served), none under a
    # trusted root; then the same with the leaf's issuer also signed by the root, served last. Path
    # building must give its verdict within its budget of signature checks, not walk the mesh's paths.
    mesh_keys = [key() for _ in range(8)]
    mesh_names = [make(f"Mesh CA {index}", ca=True, private_key=mesh_keys[index]) for index in range(8)]
    mesh = [make(f"Mesh CA {i}", issuer=Cert(mesh_names[j].certificate, mesh_keys[j]), ca=True, private_key=mesh_keys[i])
            for i in range(8) for j in range(8) if i != j]
    mesh_leaf = leaf(issuer=Cert(mesh_names[0].certificate, mesh_keys[0]))
    add("path-hostile-mesh", "path building (bounded)", host, "reject", mesh_leaf, mesh, stream_get=False)
    rescue = make("Mesh CA 0", issuer=root, ca=True, private_key=mesh_keys[0])
    add("path-hostile-mesh-with-root", "path building (bounded)", host, "accept", mesh_leaf, mesh + [rescue], stream_get=False)

    # Validity: notAfter is inclusive (RFC 5280 §4.1.2.5), at a fixed verification time.
    at = int(NOW.replace(tzinfo=datetime.timezone.utc).timestamp())
    until_now = leaf(dates=(NOW - DAY, NOW))
    add("validity-not-after-exact", "validity", host, "accept", until_now, settings={"time": at}, stream_get=False)
    add("validity-one-second-after-not-after", "validity", host, "reject", until_now, settings={"time": at + 1}, stream_get=False)
    add("validity-not-before-exact", "validity", host, "accept", leaf(dates=(NOW, NOW + DAY)), settings={"time": at}, stream_get=False)

    with open(os.path.join(directory, "cases.json"), "w") as handle:
        json.dump(corpus.cases, handle, indent=1)
    return corpus.cases


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make-tls-corpus.py DIRECTORY")
    cases = build(sys.argv[1])
    print(f"{len(cases)} cases in {sys.argv[1]}")
