#!/usr/bin/env python3
"""Counts the real certificates the strict verification profile (X509_V_FLAG_X509_STRICT) would refuse.

    pip install --target /tmp/vectors cryptography_vectors      # not part of the repository
    Scripts/measure-strict-profile.py /etc/ssl/certs /tmp/vectors/cryptography_vectors/x509

Reads every certificate in the system store and, below the second directory, every certificate
(PEM or DER) outside the PKITS suite, and reports which carry what the profile refuses: a CA
without a critical basicConstraints, a keyUsage with keyCertSign or a subjectKeyIdentifier; a
certificate below a root without an authorityKeyIdentifier; a leaf with keyCertSign; an empty
subject without a critical subjectAltName. Guides/SecuringStreamsWithTLS.md quotes its figures.
"""

import collections
import glob
import os
import re
import sys
import warnings

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import ExtensionOID

warnings.simplefilter("ignore")


def certificates(path):
    data = open(path, "rb").read()
    found = []
    if b"-----BEGIN CERTIFICATE-----" in data:
        for block in re.findall(rb"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", data, re.S):
            try:
                found.append(x509.load_pem_x509_certificate(block))
            except Exception:
                pass
    else:
        try:
            found.append(x509.load_der_x509_certificate(data))
        except Exception:
            pass
    return found


def extension(certificate, oid):
    """The extension, None when absent; raises when the extensions cannot be parsed."""
    try:
        return certificate.extensions.get_extension_for_oid(oid)
    except x509.ExtensionNotFound:
        return None


def is_ca(certificate):
    try:
        constraints = extension(certificate, ExtensionOID.BASIC_CONSTRAINTS)
    except Exception:
        return False
    return constraints is not None and constraints.value.ca


def issues(certificate):
    """What the strict profile refuses in `certificate`, as short phrases."""
    found = []
    try:
        constraints = extension(certificate, ExtensionOID.BASIC_CONSTRAINTS)
        usage = extension(certificate, ExtensionOID.KEY_USAGE)
        if is_ca(certificate):
            if not constraints.critical:
                found.append("CA basicConstraints not critical")
            if usage is None:
                found.append("CA without keyUsage")
            elif not usage.value.key_cert_sign:
                found.append("CA keyUsage without keyCertSign")
            if extension(certificate, ExtensionOID.SUBJECT_KEY_IDENTIFIER) is None:
                found.append("CA without subjectKeyIdentifier")
        elif usage is not None and usage.value.key_cert_sign:
            found.append("leaf with keyCertSign")
        if certificate.issuer != certificate.subject and extension(certificate, ExtensionOID.AUTHORITY_KEY_IDENTIFIER) is None:
            found.append("no authorityKeyIdentifier")
        if len(certificate.subject) == 0:
            names = extension(certificate, ExtensionOID.SUBJECT_ALTERNATIVE_NAME)
            if names is None or not names.critical:
                found.append("empty subject without a critical subjectAltName")
    except Exception as error:  # a certificate Python cannot read further
        found.append(f"unreadable ({type(error).__name__})")
    return found


def report(title, items):
    counts = collections.Counter(issue for _, found in items for issue in found)
    refused = [(label, found) for label, found in items if found]
    print(f"{title}: {len(items)}, {len(refused)} with something the profile refuses {dict(counts)}")
    for label, found in refused:
        print(f"    {label}: {', '.join(found)}")


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: measure-strict-profile.py SYSTEM_CERT_DIRECTORY VECTORS_DIRECTORY")
    store, vectors = sys.argv[1:]
    roots = []
    for path in sorted({os.path.realpath(item) for item in glob.glob(os.path.join(store, "*.pem"))}):
        for certificate in certificates(path)[:1]:
            roots.append((certificate.subject.rfc4514_string()[:70], issues(certificate)))
    report("system roots (trust anchors: the library exempts them)", roots)

    seen = set()
    cas, leaves = [], []
    for path in sorted(glob.glob(os.path.join(vectors, "**", "*"), recursive=True)):
        if not os.path.isfile(path) or "PKITS" in path:
            continue
        for certificate in certificates(path):
            digest = certificate.fingerprint(hashes.SHA256())
            if digest in seen:
                continue
            seen.add(digest)
            try:
                label = f"{os.path.relpath(path, vectors)} (issuer {certificate.issuer.rfc4514_string()[:50]})"
                self_issued = certificate.issuer == certificate.subject
            except (ValueError, KeyError):  # a name Python cannot parse: counted as a leaf
                label, self_issued = os.path.relpath(path, vectors), False
            if is_ca(certificate):
                cas.append((label, issues(certificate)))
            elif not self_issued:
                leaves.append((label, issues(certificate)))
    report("CA certificates in the vectors", cas)
    report("CA-issued leaves in the vectors", leaves)


if __name__ == "__main__":
    main()
