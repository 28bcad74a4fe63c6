//! Pure tests of the probe tables, masks and `Features` values (no kernel: Miri-clean).

use io_uring::opcode;

use super::*;

fn v(s: &str) -> KernelVersion {
    s.parse().expect("a kernel version")
}

#[test]
fn info_table_follows_the_enum_order() {
    assert_eq!(Feature::ALL.len(), INFO.len());
    for (i, &f) in Feature::ALL.iter().enumerate() {
        assert_eq!(f as usize, i, "{f:?}");
        assert_eq!(Feature::from_name(f.name()), Some(f));
    }
}

#[test]
fn feat_bits_are_in_bit_order() {
    let bits: Vec<u32> = Feature::ALL.iter().filter_map(|f| f.feat_bit()).collect();
    let expected: Vec<u32> = (0..bits.len() as u32).map(|i| 1 << i).collect();
    assert_eq!(bits, expected);
}

#[test]
fn names_parse_forgivingly() {
    assert_eq!(Feature::from_name("no_drop"), Some(Feature::NoDrop));
    assert_eq!(
        Feature::from_name("Multishot-Accept"),
        Some(Feature::MultishotAccept)
    );
    assert_eq!(Feature::from_name("multishot"), None);
}

#[test]
fn kernel_versions_parse_and_order() {
    assert_eq!(v("5.11"), KernelVersion::new(5, 11));
    assert!(v("5.9") < v("5.11"));
    assert!(v("5.19") < v("6.0"));
    assert_eq!(v("6.1").to_string(), "6.1");
    for bad in ["5", "5.", ".1", "5.11.2", "x.y", "5.-1", "70000.1", ""] {
        assert!(bad.parse::<KernelVersion>().is_err(), "{bad:?}");
    }
    let release = KernelVersion::from_release("6.18.0-1-cloud-amd64");
    assert_eq!(release, Some(KernelVersion::new(6, 18)));
    assert_eq!(
        KernelVersion::from_release("6.1-rc3"),
        Some(KernelVersion::new(6, 1))
    );
    assert_eq!(KernelVersion::from_release("garbage"), None);
}

#[test]
fn opcode_table_matches_the_crate_codes() {
    assert_eq!(opcode_name(opcode::Accept::CODE), "accept");
    assert_eq!(opcode_since(opcode::Accept::CODE), Some(v("5.5")));
    assert_eq!(opcode_since(opcode::OpenAt::CODE), Some(v("5.6")));
    assert_eq!(opcode_since(opcode::ProvideBuffers::CODE), Some(v("5.7")));
    assert_eq!(opcode_since(opcode::Shutdown::CODE), Some(v("5.11")));
    assert_eq!(opcode_since(opcode::MkDirAt::CODE), Some(v("5.15")));
    assert_eq!(opcode_since(opcode::MsgRingData::CODE), Some(v("5.18")));
    assert_eq!(opcode_since(opcode::Socket::CODE), Some(v("5.19")));
    assert_eq!(opcode_name(opcode::SendZc::CODE), "send_zc");
    assert_eq!(opcode_since(opcode::SendZc::CODE), Some(v("6.0")));
    assert_eq!(opcode_since(opcode::SendMsgZc::CODE), Some(v("6.1")));
    assert_eq!(opcode_since(opcode::ReadMulti::CODE), Some(v("6.7")));
    assert_eq!(opcode_since(opcode::FixedFdInstall::CODE), Some(v("6.8")));
    assert_eq!(opcode_since(OPCODE_COUNT - 1), Some(v("6.16")));
    assert_eq!(opcode_since(OPCODE_COUNT), None);
    assert_eq!(opcode_name(200), "unknown");
}

#[test]
fn opcode_versions_never_decrease() {
    let versions: Vec<KernelVersion> = (0..OPCODE_COUNT).filter_map(opcode_since).collect();
    assert!(versions.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn from_parts_reports_exactly_its_parts() {
    let features = Features::from_parts(&[Feature::ExtArg, Feature::PbufRing], &[13, 127]);
    assert!(features.has(Feature::ExtArg) && features.has(Feature::PbufRing));
    assert!(!features.has(Feature::MultishotAccept));
    assert!(features.has_opcode(13) && features.has_opcode(127));
    assert!(!features.has_opcode(14) && !features.has_opcode(255));
    assert_eq!(features.feat_raw(), 1 << 8);
    assert_eq!(features.mask_label(), None);
    let err = features.require(Feature::MultishotAccept).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::Unsupported);
    assert!(err.to_string().contains("5.19"), "{err}");
    assert!(features.require(Feature::ExtArg).is_ok());
}

fn host_like() -> Features {
    Features::from_parts(Feature::ALL, &(0..OPCODE_COUNT).collect::<Vec<u8>>())
}

#[test]
fn profile_5_11_hides_newer_features_and_opcodes() {
    let masked = host_like().masked(&FeatureMask::profile(v("5.11")));
    for hidden in [
        Feature::MultishotAccept,
        Feature::PbufRing,
        Feature::CoopTaskrun,
    ] {
        assert!(
            !masked.has(hidden) && masked.is_masked(hidden),
            "{hidden:?}"
        );
    }
    assert!(masked.has(Feature::ExtArg) && masked.has(Feature::FastPoll));
    assert!(!masked.has_opcode(opcode::Socket::CODE));
    assert!(masked.is_opcode_masked(opcode::Socket::CODE));
    assert!(masked.has_opcode(opcode::Accept::CODE) && masked.has_opcode(opcode::Shutdown::CODE));
    assert_eq!(masked.feat_raw(), 0x1ff);
    assert_eq!(masked.mask_label(), Some("5.11"));
}

#[test]
fn profile_5_1_hides_accept() {
    let masked = host_like().masked(&FeatureMask::profile(v("5.1")));
    assert!(!masked.has_opcode(opcode::Accept::CODE));
    assert!(masked.has_opcode(opcode::Readv::CODE));
    assert!(!masked.has(Feature::NoDrop) && !masked.has(Feature::SingleMmap));
    assert!(masked.has(Feature::Sqpoll));
}

#[test]
fn masking_never_adds() {
    let sparse = Features::from_parts(&[Feature::ExtArg], &[0]);
    let masked = sparse.masked(&FeatureMask::parse("pbuf_ring").unwrap());
    assert!(!masked.has(Feature::PbufRing) && !masked.is_masked(Feature::PbufRing));
    assert!(masked.has(Feature::ExtArg) && masked.has_opcode(0));
    let twice = masked.masked(&FeatureMask::profile(v("5.10")));
    assert!(!twice.has(Feature::ExtArg) && twice.is_masked(Feature::ExtArg));
    assert_eq!(twice.mask_label(), Some("-pbuf_ring + 5.10"));
}

#[test]
fn parse_accepts_lists_profiles_and_none() {
    let list = FeatureMask::parse("multishot_accept, pbuf_ring").unwrap();
    assert!(list.is_hidden(Feature::MultishotAccept) && list.is_hidden(Feature::PbufRing));
    assert!(!list.is_hidden(Feature::SendZc));
    assert_eq!(list.label(), "-multishot_accept,-pbuf_ring");
    assert_eq!(FeatureMask::parse(list.label()).unwrap(), list);
    let minus = FeatureMask::parse("-multishot_accept").unwrap();
    assert_eq!(minus, FeatureMask::default().hide(Feature::MultishotAccept));
    assert_eq!(
        FeatureMask::parse("5.11").unwrap(),
        FeatureMask::profile(v("5.11"))
    );
    let mixed = FeatureMask::parse("6.1,-send_zc").unwrap();
    assert!(mixed.is_hidden(Feature::SendZc) && mixed.is_hidden(Feature::NoSqArray));
    assert!(!mixed.is_hidden(Feature::DeferTaskrun));
    for empty in ["", "none", " NONE "] {
        let mask = FeatureMask::parse(empty).unwrap();
        assert!(mask.is_empty() && mask.label() == "none", "{empty:?}");
    }
}

#[test]
fn parse_rejects_unknown_names_listing_valid_ones() {
    let err = FeatureMask::parse("multishot_accept,bogus").unwrap_err();
    assert!(err.contains("\"bogus\""), "{err}");
    assert!(
        err.contains("pbuf_ring_inc") && err.contains("5.11"),
        "{err}"
    );
    assert!(FeatureMask::parse("5.x")
        .unwrap_err()
        .contains("kernel version"));
}

#[test]
fn hide_is_idempotent() {
    let mask = FeatureMask::default()
        .hide(Feature::SendZc)
        .hide(Feature::SendZc);
    assert_eq!(mask.label(), "-send_zc");
}

#[test]
fn table_shows_status_since_and_use() {
    let masked = host_like().masked(&FeatureMask::parse("5.19").unwrap());
    let table = masked.table().to_string();
    let row = |name: &str| {
        let line = table.lines().find(|l| l.starts_with(&format!("{name} ")));
        line.unwrap_or_default()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(
        row("multishot_accept"),
        "multishot_accept yes since 5.19 uses"
    );
    assert_eq!(
        row("multishot_recv"),
        "multishot_recv masked since 6.0 uses"
    );
    assert_eq!(row("sqpoll"), "sqpoll yes since 5.1");
    assert!(table.contains("RING_FEATURES=5.19"), "{table}");
    assert!(table.contains(" 47 send_zc"), "{table}");
}
