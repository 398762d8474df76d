//! The request's self-signature, verified with ring over the exact bytes of
//! `certificationRequestInfo`. Only the algorithms kubelets and common tools use are accepted, each
//! with the parameters Go writes: RSA (2048 bits or more) with SHA-256/384/512, ECDSA P-256 with
//! SHA-256 and P-384 with SHA-384 (the hash Go picks for each curve), and Ed25519. SHA-1, RSA-PSS,
//! other curves and other pairings are refused.

use ring::signature::{self, UnparsedPublicKey, VerificationAlgorithm};
use x509_cert::der::asn1::BitString;
use x509_cert::der::oid::ObjectIdentifier;
use x509_cert::der::{Any, Encode, Tag, Tagged};
use x509_cert::request::CertReq;
use x509_cert::spki::AlgorithmIdentifier;

use super::CsrError;
use super::causes::{NotStrict, Unsupported};

const RSA_ENCRYPTION: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");
const SHA256_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.11");
const SHA384_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.12");
const SHA512_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.13");
const EC_PUBLIC_KEY: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
const P256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
const P384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.34");
const ECDSA_WITH_SHA256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.2");
const ECDSA_WITH_SHA384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.3");
const ED25519: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.101.112");

/// The public key's type, from its AlgorithmIdentifier.
#[derive(Clone, Copy)]
enum KeyType {
    Rsa,
    EcdsaP256,
    EcdsaP384,
    Ed25519,
}

/// Verifies the self-signature of a strictly decoded request.
pub(super) fn verify(request: &CertReq) -> Result<(), CsrError> {
    let key_type = key_type(&request.info.public_key.algorithm)?;
    let algorithm = verification_algorithm(key_type, &request.algorithm)?;
    let key = whole_bytes(&request.info.public_key.subject_public_key, "public key")?;
    let signature = whole_bytes(&request.signature, "signature")?;
    let message = request.info.to_der().map_err(|e| CsrError::NotStrictDer(NotStrict::Der(e)))?;
    UnparsedPublicKey::new(algorithm, key).verify(&message, signature).map_err(|_| CsrError::BadSignature)
}

fn key_type(algorithm: &AlgorithmIdentifier<Any>) -> Result<KeyType, CsrError> {
    let params = algorithm.parameters.as_ref();
    let curve =
        params.filter(|p| p.tag() == Tag::ObjectIdentifier).and_then(|p| p.decode_as::<ObjectIdentifier>().ok());
    match (algorithm.oid, params, curve) {
        (RSA_ENCRYPTION, Some(p), _) if is_null(p) => Ok(KeyType::Rsa),
        (EC_PUBLIC_KEY, _, Some(P256)) => Ok(KeyType::EcdsaP256),
        (EC_PUBLIC_KEY, _, Some(P384)) => Ok(KeyType::EcdsaP384),
        (ED25519, None, _) => Ok(KeyType::Ed25519),
        (oid, _, _) => Err(CsrError::UnsupportedSignature(Unsupported::KeyAlgorithm(oid))),
    }
}

fn is_null(value: &Any) -> bool {
    value.tag() == Tag::Null && value.value().is_empty()
}

fn verification_algorithm(
    key: KeyType,
    algorithm: &AlgorithmIdentifier<Any>,
) -> Result<&'static dyn VerificationAlgorithm, CsrError> {
    let null_params = algorithm.parameters.as_ref().is_some_and(is_null);
    let no_params = algorithm.parameters.is_none();
    let chosen: Option<&'static dyn VerificationAlgorithm> = match (key, algorithm.oid) {
        (KeyType::Rsa, SHA256_WITH_RSA) if null_params => Some(&signature::RSA_PKCS1_2048_8192_SHA256),
        (KeyType::Rsa, SHA384_WITH_RSA) if null_params => Some(&signature::RSA_PKCS1_2048_8192_SHA384),
        (KeyType::Rsa, SHA512_WITH_RSA) if null_params => Some(&signature::RSA_PKCS1_2048_8192_SHA512),
        (KeyType::EcdsaP256, ECDSA_WITH_SHA256) if no_params => Some(&signature::ECDSA_P256_SHA256_ASN1),
        (KeyType::EcdsaP384, ECDSA_WITH_SHA384) if no_params => Some(&signature::ECDSA_P384_SHA384_ASN1),
        (KeyType::Ed25519, ED25519) if no_params => Some(&signature::ED25519),
        _ => None,
    };
    chosen.ok_or(CsrError::UnsupportedSignature(Unsupported::SignatureAlgorithm(algorithm.oid)))
}

/// The contents of a BIT STRING that has no unused bits.
fn whole_bytes<'a>(bits: &'a BitString, what: &'static str) -> Result<&'a [u8], CsrError> {
    bits.as_bytes().ok_or(CsrError::NotStrictDer(NotStrict::UnusedBits(what)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use rcgen::{CertificateParams, KeyPair, SignatureAlgorithm};
    use x509_cert::der::{Any, Decode, Tag};
    use x509_cert::request::CertReq;

    use super::{CsrError, P256, verify};

    const RSA_KEY: &str = include_str!("../../tests/fixtures/rsa-2048.key.pem");
    const P521: &str = "1.3.132.0.35";

    fn request(algorithm: &'static SignatureAlgorithm) -> CertReq {
        let key = if algorithm == &rcgen::PKCS_RSA_SHA256
            || algorithm == &rcgen::PKCS_RSA_SHA384
            || algorithm == &rcgen::PKCS_RSA_SHA512
        {
            KeyPair::from_pem_and_sign_algo(RSA_KEY, algorithm).unwrap()
        } else {
            KeyPair::generate_for(algorithm).unwrap()
        };
        let der = CertificateParams::default().serialize_request(&key).unwrap().der().to_vec();
        CertReq::from_der(&der).unwrap()
    }

    fn null() -> Any {
        Any::new(Tag::Null, Vec::new()).unwrap()
    }

    fn unsupported(result: Result<(), CsrError>) -> bool {
        matches!(result, Err(CsrError::UnsupportedSignature(_)))
    }

    #[test]
    fn every_accepted_algorithm_verifies() {
        for algorithm in [
            &rcgen::PKCS_RSA_SHA256,
            &rcgen::PKCS_RSA_SHA384,
            &rcgen::PKCS_RSA_SHA512,
            &rcgen::PKCS_ECDSA_P256_SHA256,
            &rcgen::PKCS_ECDSA_P384_SHA384,
            &rcgen::PKCS_ED25519,
        ] {
            assert_eq!(verify(&request(algorithm)), Ok(()), "{algorithm:?}");
        }
    }

    #[test]
    fn a_changed_signature_does_not_verify() {
        for algorithm in [&rcgen::PKCS_RSA_SHA256, &rcgen::PKCS_ECDSA_P256_SHA256, &rcgen::PKCS_ED25519] {
            let mut request = request(algorithm);
            let mut bytes = request.signature.raw_bytes().to_vec();
            bytes[10] ^= 1;
            request.signature = x509_cert::der::asn1::BitString::from_bytes(&bytes).unwrap();
            assert_eq!(verify(&request), Err(CsrError::BadSignature), "{algorithm:?}");
        }
    }

    #[test]
    fn signature_parameters_must_be_the_ones_go_writes() {
        for algorithm in [&rcgen::PKCS_RSA_SHA256, &rcgen::PKCS_RSA_SHA384, &rcgen::PKCS_RSA_SHA512] {
            let mut without_null = request(algorithm);
            without_null.algorithm.parameters = None;
            assert!(unsupported(verify(&without_null)), "{algorithm:?} without NULL");
        }
        for algorithm in [&rcgen::PKCS_ECDSA_P256_SHA256, &rcgen::PKCS_ECDSA_P384_SHA384, &rcgen::PKCS_ED25519] {
            let mut with_null = request(algorithm);
            with_null.algorithm.parameters = Some(null());
            assert!(unsupported(verify(&with_null)), "{algorithm:?} with NULL");
        }
    }

    #[test]
    fn key_parameters_must_be_the_ones_go_writes() {
        let mut rsa_without_null = request(&rcgen::PKCS_RSA_SHA256);
        rsa_without_null.info.public_key.algorithm.parameters = None;
        assert!(unsupported(verify(&rsa_without_null)));
        let mut rsa_with_other = request(&rcgen::PKCS_RSA_SHA256);
        rsa_with_other.info.public_key.algorithm.parameters = Some(Any::new(Tag::OctetString, Vec::new()).unwrap());
        assert!(unsupported(verify(&rsa_with_other)));
        let mut ed_with_null = request(&rcgen::PKCS_ED25519);
        ed_with_null.info.public_key.algorithm.parameters = Some(null());
        assert!(unsupported(verify(&ed_with_null)));
        let mut other_curve = request(&rcgen::PKCS_ECDSA_P256_SHA256);
        let p521 = x509_cert::der::oid::ObjectIdentifier::new(P521).unwrap();
        other_curve.info.public_key.algorithm.parameters = Some(Any::encode_from(&p521).unwrap());
        assert!(unsupported(verify(&other_curve)));
        let mut curve_as_string = request(&rcgen::PKCS_ECDSA_P256_SHA256);
        curve_as_string.info.public_key.algorithm.parameters =
            Some(Any::new(Tag::OctetString, P256.as_bytes().to_vec()).unwrap());
        assert!(unsupported(verify(&curve_as_string)));
    }

    #[test]
    fn keys_and_signature_algorithms_must_pair() {
        let ecdsa_alg = request(&rcgen::PKCS_ECDSA_P256_SHA256).algorithm;
        let p384_alg = request(&rcgen::PKCS_ECDSA_P384_SHA384).algorithm;
        let rsa_alg = request(&rcgen::PKCS_RSA_SHA256).algorithm;
        let mut rsa_key_ecdsa_alg = request(&rcgen::PKCS_RSA_SHA256);
        rsa_key_ecdsa_alg.algorithm = ecdsa_alg.clone();
        assert!(unsupported(verify(&rsa_key_ecdsa_alg)));
        let mut p256_with_sha384 = request(&rcgen::PKCS_ECDSA_P256_SHA256);
        p256_with_sha384.algorithm = p384_alg;
        assert!(unsupported(verify(&p256_with_sha384)));
        let mut p384_with_sha256 = request(&rcgen::PKCS_ECDSA_P384_SHA384);
        p384_with_sha256.algorithm = ecdsa_alg;
        assert!(unsupported(verify(&p384_with_sha256)));
        let mut ed_with_rsa = request(&rcgen::PKCS_ED25519);
        ed_with_rsa.algorithm = rsa_alg;
        assert!(unsupported(verify(&ed_with_rsa)));
    }

    #[test]
    fn null_means_an_empty_null() {
        assert!(super::is_null(&null()));
        assert!(!super::is_null(&Any::new(Tag::OctetString, Vec::new()).unwrap()));
        assert!(!super::is_null(&Any::new(Tag::Null, vec![0]).unwrap()));
    }
}
