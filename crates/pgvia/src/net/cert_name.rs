//! The subject common name of a DER certificate, for `cert` authentication: just enough
//! DER to walk to the subject, written for this one purpose (rustls has verified the
//! certificate by the time it is read).

/// The subject's first CN, if the certificate has one that is valid UTF-8.
pub fn common_name(der: &[u8]) -> Option<String> {
    let (cert, _) = element(der, 0x30)?;
    let (tbs, _) = element(cert, 0x30)?;
    let mut rest = tbs;
    // version [0] EXPLICIT, optional.
    if rest.first() == Some(&0xa0) {
        rest = element(rest, 0xa0)?.1;
    }
    rest = element(rest, 0x02)?.1; // serialNumber
    rest = element(rest, 0x30)?.1; // signature
    rest = element(rest, 0x30)?.1; // issuer
    rest = element(rest, 0x30)?.1; // validity
    let (mut subject, _) = element(rest, 0x30)?;
    while !subject.is_empty() {
        let (mut set, after) = element(subject, 0x31)?;
        subject = after;
        while !set.is_empty() {
            let (attr, after) = element(set, 0x30)?;
            set = after;
            let (oid, value) = element(attr, 0x06)?;
            if oid == [0x55, 0x04, 0x03] {
                let (&tag, _) = value.split_first()?;
                let (text, _) = element(value, tag)?;
                return String::from_utf8(text.to_vec()).ok();
            }
        }
    }
    None
}

/// Splits one DER element with tag `tag` off the front: (contents, what follows).
fn element(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&first, rest) = input.split_first()?;
    if first != tag {
        return None;
    }
    let (&len0, rest) = rest.split_first()?;
    let (len, rest) = if len0 < 0x80 {
        (usize::from(len0), rest)
    } else {
        let n = usize::from(len0 & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some(rest.split_at(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_common_name_and_never_panics_on_garbage() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params.distinguished_name.push(rcgen::DnType::OrganizationName, "pgvia");
        params.distinguished_name.push(rcgen::DnType::CommonName, "alice");
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(common_name(cert.der()).as_deref(), Some("alice"));
        let der = cert.der().to_vec();
        for cut in 0..der.len() {
            let _ = common_name(&der[..cut]);
        }
        assert_eq!(common_name(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
    }
}
