// The system OpenSSL (3.x, Debian's libssl-dev), and C functions for the macros Swift cannot call.
#ifndef C_OPENSSL_SHIM_H
#define C_OPENSSL_SHIM_H

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

#endif
