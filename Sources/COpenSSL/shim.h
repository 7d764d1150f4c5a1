// The system OpenSSL (3.x, Debian's libssl-dev), and C functions for the macros Swift cannot call.
#ifndef C_OPENSSL_SHIM_H
#define C_OPENSSL_SHIM_H

#include <stdio.h>
#include <string.h>
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/pem.h>
#include <openssl/pkcs12.h>
#include <openssl/evp.h>
#include <openssl/bio.h>
#include <openssl/rand.h>
#include <openssl/ec.h>

static inline int cssl_ctx_set_min_proto_version(SSL_CTX *ctx, int version) {
    return (int)SSL_CTX_set_min_proto_version(ctx, version);
}
static inline int cssl_ctx_set_max_proto_version(SSL_CTX *ctx, int version) {
    return (int)SSL_CTX_set_max_proto_version(ctx, version);
}
static inline long cssl_ctx_set_mode(SSL_CTX *ctx, long mode) { return SSL_CTX_set_mode(ctx, mode); }
static inline long cssl_ctx_set_session_cache_mode(SSL_CTX *ctx, long mode) {
    return SSL_CTX_set_session_cache_mode(ctx, mode);
}
static inline int cssl_ctx_add1_chain_cert(SSL_CTX *ctx, X509 *cert) { return (int)SSL_CTX_add1_chain_cert(ctx, cert); }
static inline int cssl_set_tlsext_host_name(SSL *ssl, const char *name) {
    return (int)SSL_set_tlsext_host_name(ssl, name);
}
static inline void cssl_bio_set_retry_read(BIO *bio) { BIO_set_retry_read(bio); }
static inline void cssl_bio_set_retry_write(BIO *bio) { BIO_set_retry_write(bio); }
static inline void cssl_bio_clear_retry_flags(BIO *bio) { BIO_clear_retry_flags(bio); }
static inline long cssl_bio_get_mem_data(BIO *bio, char **data) { return BIO_get_mem_data(bio, data); }
static inline int cssl_sk_X509_num(const STACK_OF(X509) *stack) { return sk_X509_num(stack); }
static inline X509 *cssl_sk_X509_value(const STACK_OF(X509) *stack, int index) { return sk_X509_value(stack, index); }
static inline void cssl_sk_X509_pop_free(STACK_OF(X509) *stack) { sk_X509_pop_free(stack, X509_free); }
static inline void cssl_free(void *pointer) { OPENSSL_free(pointer); }
static inline STACK_OF(X509) *cssl_sk_X509_new_null(void) { return sk_X509_new_null(); }
/// Appends `cert` with a reference of its own (freed with the stack by cssl_sk_X509_pop_free).
static inline int cssl_sk_X509_push_up_ref(STACK_OF(X509) *stack, X509 *cert) {
    if (!X509_up_ref(cert)) return 0;
    if (sk_X509_push(stack, cert) > 0) return 1;
    X509_free(cert);
    return 0;
}

static inline uint64_t cssl_op_no_renegotiation(void) { return SSL_OP_NO_RENEGOTIATION; }

static inline unsigned long cssl_xn_flag_rfc2253(void) { return XN_FLAG_RFC2253; }

// Version constants (macros of expressions Swift does not import as constants).
static inline int cssl_tls1_2_version(void) { return TLS1_2_VERSION; }
static inline int cssl_tls1_3_version(void) { return TLS1_3_VERSION; }

// Ex-data indexes (the *_get_ex_new_index macros).
static inline int cssl_ctx_get_ex_new_index(void) {
    return CRYPTO_get_ex_new_index(CRYPTO_EX_INDEX_SSL_CTX, 0, NULL, NULL, NULL, NULL);
}
static inline int cssl_get_ex_new_index(void) {
    return CRYPTO_get_ex_new_index(CRYPTO_EX_INDEX_SSL, 0, NULL, NULL, NULL, NULL);
}

// Error-queue helpers.
static inline int cssl_err_lib(unsigned long code) { return ERR_GET_LIB(code); }
static inline int cssl_err_reason(unsigned long code) { return ERR_GET_REASON(code); }

// Certificate extensions the verify callback checks itself (OpenSSL's stack macros, and the
// decoded extensions, freed by the caller with the matching *_free).
static inline int cssl_x509_is_ca(X509 *x) {
    // basicConstraints with cA TRUE (not OpenSSL's looser EXFLAG_CA, which also covers v1 roots).
    BASIC_CONSTRAINTS *bc = X509_get_ext_d2i(x, NID_basic_constraints, NULL, NULL);
    int ca = bc != NULL && bc->ca;
    BASIC_CONSTRAINTS_free(bc);
    return ca;
}
/// The decoded nameConstraints (NULL when absent or undecodable; `present` tells which), to be NAME_CONSTRAINTS_free'd.
static inline NAME_CONSTRAINTS *cssl_x509_name_constraints(X509 *x, int *present) {
    *present = X509_get_ext_by_NID(x, NID_name_constraints, -1) >= 0;
    if (!*present) return NULL;
    ERR_set_mark();
    NAME_CONSTRAINTS *nc = X509_get_ext_d2i(x, NID_name_constraints, NULL, NULL);
    ERR_pop_to_mark();
    return nc;
}
static inline int cssl_nc_count(NAME_CONSTRAINTS *nc, int excluded) {
    STACK_OF(GENERAL_SUBTREE) *trees = excluded ? nc->excludedSubtrees : nc->permittedSubtrees;
    return trees == NULL ? 0 : sk_GENERAL_SUBTREE_num(trees);
}
/// The subtree's base when it is a dNSName (its bytes and length), NULL otherwise.
static inline const unsigned char *cssl_nc_dns(NAME_CONSTRAINTS *nc, int excluded, int index, int *length) {
    STACK_OF(GENERAL_SUBTREE) *trees = excluded ? nc->excludedSubtrees : nc->permittedSubtrees;
    GENERAL_SUBTREE *tree = sk_GENERAL_SUBTREE_value(trees, index);
    if (tree == NULL || tree->base == NULL || tree->base->type != GEN_DNS) return NULL;
    *length = ASN1_STRING_length(tree->base->d.dNSName);
    return ASN1_STRING_get0_data(tree->base->d.dNSName);
}
/// The first dNSName in the subjectAltName with a '*' that is not a whole left-most label
/// ("ba*.example.com", "foo.*.example.com"), copied NUL-terminated into `buffer`; 0 when none.
static inline int cssl_x509_partial_wildcard(X509 *x, char *buffer, int size) {
    GENERAL_NAMES *names = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
    int found = 0;
    for (int i = 0; names != NULL && i < sk_GENERAL_NAME_num(names) && !found; i++) {
        GENERAL_NAME *name = sk_GENERAL_NAME_value(names, i);
        if (name->type != GEN_DNS) continue;
        const char *text = (const char *)ASN1_STRING_get0_data(name->d.dNSName);
        int length = ASN1_STRING_length(name->d.dNSName);
        const char *star = memchr(text, '*', (size_t)length);
        if (star == NULL || (star == text && length > 1 && text[1] == '.' && memchr(text + 1, '*', (size_t)length - 1) == NULL)) continue;
        found = 1;
        int copied = length < size - 1 ? length : size - 1;
        memcpy(buffer, text, (size_t)copied);
        buffer[copied] = 0;
    }
    GENERAL_NAMES_free(names);
    return found;
}
/// Whether the certificate has a subjectAltName with at least one dNSName.
static inline int cssl_x509_has_dns_san(X509 *x) {
    GENERAL_NAMES *names = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
    int found = 0;
    for (int i = 0; names != NULL && i < sk_GENERAL_NAME_num(names); i++) {
        if (sk_GENERAL_NAME_value(names, i)->type == GEN_DNS) found = 1;
    }
    GENERAL_NAMES_free(names);
    return found;
}
/// The NID of the first extension OpenSSL knows but cannot decode (a malformed authorityInfoAccess,
/// certificatePolicies, subjectAltName…), 0 when every one decodes. The SCT list is left out:
/// Certificate Transparency's contents are not the chain's validity.
static inline int cssl_x509_undecodable_extension(X509 *x) {
    ERR_set_mark();  // a failed decode queues ASN.1 errors, which are not the handshake's
    int found = 0;
    for (int i = 0; i < X509_get_ext_count(x) && found == 0; i++) {
        X509_EXTENSION *extension = X509_get_ext(x, i);
        const X509V3_EXT_METHOD *method = X509V3_EXT_get(extension);
        int nid = OBJ_obj2nid(X509_EXTENSION_get_object(extension));
        if (method == NULL || nid == NID_ct_precert_scts) continue;
        void *decoded = X509V3_EXT_d2i(extension);
        if (decoded == NULL) {
            found = nid;
        } else if (method->it != NULL) {
            ASN1_item_free(decoded, ASN1_ITEM_ptr(method->it));
        } else if (method->ext_free != NULL) {
            method->ext_free(decoded);
        }
    }
    ERR_pop_to_mark();
    return found;
}
/// The public-key algorithm of the certificate's signature (NID_dsa for DSA), NID_undef if unknown.
static inline int cssl_x509_signature_key_nid(X509 *x) {
    int key = NID_undef;
    if (!OBJ_find_sigid_algs(X509_get_signature_nid(x), NULL, &key)) return NID_undef;
    return key;
}
/// Whether the subjectAltName is marked critical while the subject is not empty.
static inline int cssl_x509_san_critical_with_subject(X509 *x) {
    int index = X509_get_ext_by_NID(x, NID_subject_alt_name, -1);
    if (index < 0 || !X509_EXTENSION_get_critical(X509_get_ext(x, index))) return 0;
    return X509_NAME_entry_count(X509_get_subject_name(x)) > 0;
}


// The CA/Browser Forum Baseline Requirements' certificate profile (VerificationProfile.baselineRequirements):
// the first rule `x` breaks, as a phrase copied NUL-terminated into `buffer`; 0 when it breaks none.
// `role`: 0 for the leaf, 1 for an intermediate, 2 for the trust anchor.
static inline int cssl_baseline_copy(char *buffer, int size, const char *text) {
    snprintf(buffer, (size_t)size, "%s", text);
    return 1;
}
/// An IPv6 address in RFC 5952's text: lower-case hex, no leading zeros, the longest run of two or
/// more zero groups (the first of equal runs) as "::".
static inline void cssl_ipv6_rfc5952(const unsigned char *address, char *text, size_t size) {
    unsigned int groups[8];
    for (int g = 0; g < 8; g++) groups[g] = (unsigned int)(address[2 * g] << 8 | address[2 * g + 1]);
    int best = -1, best_length = 1;
    for (int g = 0; g < 8;) {
        if (groups[g] != 0) { g++; continue; }
        int run = g;
        while (g < 8 && groups[g] == 0) g++;
        if (g - run > best_length) { best = run; best_length = g - run; }
    }
    size_t used = 0;
    text[0] = 0;
    for (int g = 0; g < 8 && used < size; g++) {
        if (g == best) {
            used += (size_t)snprintf(text + used, size - used, "::");
            g += best_length - 1;
            continue;
        }
        int separator = g > 0 && g != best + best_length;
        used += (size_t)snprintf(text + used, size - used, "%s%x", separator ? ":" : "", groups[g]);
    }
}
/// Whether a subjectAltName dNSName is in the preferred name syntax the Baseline Requirements ask for
/// (RFC 1034 §3.5 as RFC 5280 §4.2.1.6 cites it): labels of 1 to 63 letters, digits and hyphens, no hyphen
/// first or last, none empty (so no leading, trailing or doubled period), the first label alone may be "*";
/// 253 bytes at most. Underscores are refused on their own (their own message).
static inline int cssl_preferred_dns_syntax(const char *text, int length) {
    if (length <= 0 || length > 253) return 0;
    int start = 0;
    for (int at = 0; at <= length; at++) {
        if (at < length && text[at] != '.') continue;
        int label = at - start;
        if (label == 0 || label > 63) return 0;
        if (!(start == 0 && label == 1 && text[0] == '*' && at < length)) {
            if (text[start] == '-' || text[at - 1] == '-') return 0;
            for (int i = start; i < at; i++) {
                char c = text[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_')) return 0;
            }
        }
        start = at + 1;
    }
    return 1;
}
/// The subjectAltName's dNSNames that are wildcards ("*.rest"), each's "rest" followed by a newline, copied
/// into `buffer` (NUL-terminated, cut at `size`); the length the whole would need.
static inline int cssl_x509_wildcard_bases(X509 *x, char *buffer, int size) {
    GENERAL_NAMES *names = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
    int used = 0;
    if (size > 0) buffer[0] = 0;
    for (int i = 0; names != NULL && i < sk_GENERAL_NAME_num(names); i++) {
        GENERAL_NAME *name = sk_GENERAL_NAME_value(names, i);
        if (name->type != GEN_DNS) continue;
        const char *text = (const char *)ASN1_STRING_get0_data(name->d.dNSName);
        int length = ASN1_STRING_length(name->d.dNSName);
        if (length < 3 || text[0] != '*' || text[1] != '.' || memchr(text, 0, (size_t)length)) continue;
        if (used + length - 2 + 1 < size) {
            memcpy(buffer + used, text + 2, (size_t)length - 2);
            buffer[used + length - 2] = '\n';
            buffer[used + length - 1] = 0;
        }
        used += length - 1;
    }
    GENERAL_NAMES_free(names);
    return used;
}
static inline int cssl_x509_baseline_violation(X509 *x, int role, char *buffer, int size) {
    EVP_PKEY *key = X509_get0_pubkey(x);
    if (key != NULL && EVP_PKEY_get_base_id(key) == EVP_PKEY_RSA && EVP_PKEY_get_bits(key) % 8 != 0)
        return cssl_baseline_copy(buffer, size, "an RSA modulus whose length is not a multiple of 8 bits (BR 6.1.5)");
    int eku_index = X509_get_ext_by_NID(x, NID_ext_key_usage, -1);
    if (role == 0) {
        if (eku_index < 0) return cssl_baseline_copy(buffer, size, "a server certificate without an extendedKeyUsage (BR 7.1.2.7.10)");
        if (X509_EXTENSION_get_critical(X509_get_ext(x, eku_index)))
            return cssl_baseline_copy(buffer, size, "a critical extendedKeyUsage (BR 7.1.2.7.10)");
        EXTENDED_KEY_USAGE *usages = X509_get_ext_d2i(x, NID_ext_key_usage, NULL, NULL);
        int any = 0;
        for (int i = 0; usages != NULL && i < sk_ASN1_OBJECT_num(usages); i++) {
            if (OBJ_obj2nid(sk_ASN1_OBJECT_value(usages, i)) == NID_anyExtendedKeyUsage) any = 1;
        }
        EXTENDED_KEY_USAGE_free(usages);
        if (any) return cssl_baseline_copy(buffer, size, "anyExtendedKeyUsage in a server certificate (BR 7.1.2.7.10)");
        const ASN1_INTEGER *serial = X509_get0_serialNumber(x);
        int length = ASN1_STRING_length(serial);
        const unsigned char *bytes = ASN1_STRING_get0_data(serial);
        int zero = 1;
        for (int i = 0; i < length; i++) zero &= bytes[i] == 0;
        if (zero) return cssl_baseline_copy(buffer, size, "a serial number of zero (BR 7.1: positive, at most 20 octets)");
        if (length + (bytes[0] & 0x80 ? 1 : 0) > 20)
            return cssl_baseline_copy(buffer, size, "a serial number longer than 20 octets (BR 7.1)");
        GENERAL_NAMES *names = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
        int underscore = 0;
        char malformed[96] = {0};
        for (int i = 0; names != NULL && i < sk_GENERAL_NAME_num(names); i++) {
            GENERAL_NAME *name = sk_GENERAL_NAME_value(names, i);
            if (name->type != GEN_DNS) continue;
            const char *text = (const char *)ASN1_STRING_get0_data(name->d.dNSName);
            int text_length = ASN1_STRING_length(name->d.dNSName);
            if (memchr(text, '_', (size_t)text_length)) underscore = 1;
            else if (!malformed[0] && !cssl_preferred_dns_syntax(text, text_length))
                snprintf(malformed, sizeof malformed, "%.*s", text_length > 80 ? 80 : text_length, text);
        }
        // Every subject CN must be one of the subjectAltName's entries, byte for byte (an address in
        // its canonical text: dotted decimal, RFC 5952).
        int unmatched = 0;
        X509_NAME *subject = X509_get_subject_name(x);
        for (int at = X509_NAME_get_index_by_NID(subject, NID_commonName, -1); at >= 0 && !unmatched;
             at = X509_NAME_get_index_by_NID(subject, NID_commonName, at)) {
            unsigned char *cn = NULL;
            int cn_length = ASN1_STRING_to_UTF8(&cn, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, at)));
            int found = 0;
            for (int i = 0; cn_length >= 0 && names != NULL && i < sk_GENERAL_NAME_num(names) && !found; i++) {
                GENERAL_NAME *name = sk_GENERAL_NAME_value(names, i);
                if (name->type == GEN_DNS) {
                    found = ASN1_STRING_length(name->d.dNSName) == cn_length
                        && memcmp(ASN1_STRING_get0_data(name->d.dNSName), cn, (size_t)cn_length) == 0;
                } else if (name->type == GEN_IPADD) {
                    char text[64] = {0};
                    int address_length = ASN1_STRING_length(name->d.iPAddress);
                    const unsigned char *address = ASN1_STRING_get0_data(name->d.iPAddress);
                    if (address_length == 4) snprintf(text, sizeof text, "%u.%u.%u.%u", address[0], address[1], address[2], address[3]);
                    if (address_length == 16) cssl_ipv6_rfc5952(address, text, sizeof text);
                    found = (int)strlen(text) == cn_length && memcmp(text, cn, (size_t)cn_length) == 0;
                }
            }
            OPENSSL_free(cn);
            unmatched = !found;
        }
        GENERAL_NAMES_free(names);
        if (underscore) return cssl_baseline_copy(buffer, size, "an underscore in a DNS name of the subjectAltName (BR 7.1.2.7.12)");
        if (malformed[0]) {
            snprintf(buffer, (size_t)size,
                     "a DNS name of the subjectAltName that is not a host name (\"%s\"; BR 7.1.2.7.12: labels of 1 to 63 letters, "
                     "digits and inner hyphens, none empty, a wildcard only as the whole first label)", malformed);
            return 1;
        }
        if (unmatched) return cssl_baseline_copy(buffer, size, "a subject CN that is not one of the subjectAltName's entries (BR 7.1.2.7.2)");
        return 0;
    }
    if (role == 2) {
        if (eku_index >= 0) return cssl_baseline_copy(buffer, size, "a root with an extendedKeyUsage (BR 7.1.2.1.2)");
        int bc_index = X509_get_ext_by_NID(x, NID_basic_constraints, -1);
        if (bc_index >= 0 && !X509_EXTENSION_get_critical(X509_get_ext(x, bc_index)))
            return cssl_baseline_copy(buffer, size, "a root whose basicConstraints is not critical (BR 7.1.2.1.2)");
        const ASN1_OCTET_STRING *ski = X509_get0_subject_key_id(x);
        if (ski == NULL) return cssl_baseline_copy(buffer, size, "a root without a subjectKeyIdentifier (BR 7.1.2.1.2)");
        if (X509_get_ext_by_NID(x, NID_authority_key_identifier, -1) >= 0) {
            AUTHORITY_KEYID *aki = X509_get_ext_d2i(x, NID_authority_key_identifier, NULL, NULL);
            int bad = aki == NULL || aki->keyid == NULL || aki->issuer != NULL || aki->serial != NULL
                || ASN1_OCTET_STRING_cmp(aki->keyid, ski) != 0;
            AUTHORITY_KEYID_free(aki);
            if (bad)
                return cssl_baseline_copy(
                    buffer, size, "a root whose authorityKeyIdentifier is not just its own key identifier (BR 7.1.2.1.3)");
        }
        return 0;
    }
    int pc_index = X509_get_ext_by_NID(x, NID_policy_constraints, -1);
    if (pc_index >= 0 && !X509_EXTENSION_get_critical(X509_get_ext(x, pc_index)))
        return cssl_baseline_copy(buffer, size, "policyConstraints that are not critical (RFC 5280 4.2.1.11, BR 7.1.2.10)");
    return 0;
}

#endif
