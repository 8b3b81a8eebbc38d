//! Tests of `config/sections.rs`.

use super::*;

const FILE: &str = "admin:\n  bind: 127.0.0.1:9191\nshop:\n  workers: 4\n  bind: x\n";

#[test]
fn a_programs_section_is_kept_as_written_and_any_other_unknown_key_refused() {
    let c = Config::from_yaml_str_with_sections(FILE, &["shop"]).unwrap();
    assert_eq!(c.admin.bind, "127.0.0.1:9191");
    assert_eq!(c.app.names(), ["shop"]);
    assert_eq!(c.app.values["shop"]["workers"], 4);
    let e = Config::from_yaml_str(FILE).unwrap_err().to_string();
    assert_eq!(
        e,
        "shop is not a known key; the keys here are admin, classifier, limiters, store (line 3, column 1)"
    );
    // The program's own section is among the keys a typo is matched against.
    let e = Config::from_yaml_str_with_sections("shopp: {}\n", &["shop"]).unwrap_err();
    assert!(e.to_string().contains("did you mean shop?"), "{e}");
    let e = Config::from_yaml_str_with_sections("zzz: {}\n", &["shop"]).unwrap_err();
    assert!(
        e.to_string()
            .contains("admin, classifier, limiters, store, shop"),
        "{e}"
    );
    // Errors inside brownout's own sections read as before.
    let e = Config::from_yaml_str_with_sections("shop: 1\nadmin:\n  bindd: x\n", &["shop"])
        .unwrap_err();
    assert_eq!(e.key(), Some("admin.bindd"));
}

#[test]
fn a_change_to_a_programs_section_is_named_by_its_dotted_key() {
    let a = Config::from_yaml_str_with_sections(FILE, &["shop"]).unwrap();
    let same = FILE.replace("admin:\n  bind: 127.0.0.1:9191\n", "");
    let b = Config::from_yaml_str_with_sections(&same, &["shop"]).unwrap();
    assert_eq!(a.app.first_change(&b.app), None);
    let c = Config::from_yaml_str_with_sections(&FILE.replace("4", "5"), &["shop"]).unwrap();
    assert_eq!(a.app.first_change(&c.app).as_deref(), Some("shop.workers"));
    let gone = Config::from_yaml_str_with_sections("{}", &["shop"]).unwrap();
    assert_eq!(a.app.first_change(&gone.app).as_deref(), Some("shop"));
}

#[test]
fn a_program_reads_its_section_with_brownouts_messages() {
    #[derive(serde::Deserialize, Default, Debug, PartialEq)]
    #[serde(deny_unknown_fields, default)]
    struct Shop {
        workers: u32,
        bind: String,
    }
    let ok = |_: &Shop| Ok(());
    let shop: Shop = app_section(FILE, "shop", ok).unwrap();
    assert_eq!((shop.workers, shop.bind.as_str()), (4, "x"));
    assert_eq!(
        app_section::<Shop>("admin: {}\n", "shop", ok).unwrap(),
        Shop::default()
    );
    let e = app_section::<Shop>("shop:\n  workers: many\n", "shop", ok).unwrap_err();
    assert_eq!(
        e.to_string(),
        "shop.workers must be a whole number (0 to 4294967295), not \"many\" (line 2, column 12)"
    );
    let e = app_section::<Shop>("shop:\n  worker: 1\n", "shop", ok).unwrap_err();
    assert_eq!(e.key(), Some("shop.worker"));
}
