//! Overrides: `(dotted key, value)` pairs set over a scenario's TOML
//! before it is deserialized (`background.load = 0.5`, `jobs.0.model =
//! vgg16`, `engine = packet`): how `shoal sim run --engine` and the PANAMA
//! reproduction's set-ups change a scenario without writing TOML.
//!
//! A value is read as a TOML value when it is one (`8`, `0.5`, `true`,
//! `["a", "b"]`), else as a string (`64MiB`, `fattree:k=4`), so that the
//! key's own deserializer judges it as if the file had said it.

use super::config::ConfigError;
use super::schema::TABLE_ARRAYS;

/// Sets each pair over `table`, in order (a later pair wins).
pub fn apply(
    table: &mut toml::Table,
    pairs: &[(impl AsRef<str>, impl AsRef<str>)],
) -> Result<(), ConfigError> {
    for (key, value) in pairs {
        set(table, key.as_ref(), value_of(value.as_ref()))?;
    }
    Ok(())
}

/// `text` as the TOML value it spells, or as a string.
fn value_of(text: &str) -> toml::Value {
    let parsed = format!("v = {text}").parse::<toml::Table>().ok();
    match parsed
        .filter(|t| t.len() == 1)
        .and_then(|mut t| t.remove("v"))
    {
        Some(value) => value,
        None => toml::Value::String(text.to_string()),
    }
}

/// Sets `key` (dotted) to `value`, making the tables on its way; a key
/// under an array of tables (`jobs`) names the element, `jobs.N.FIELD`,
/// N at most the number of elements so far (N equal to it adds one).
fn set(table: &mut toml::Table, key: &str, value: toml::Value) -> Result<(), ConfigError> {
    let parts: Vec<&str> = key.split('.').collect();
    let (last, path) = parts.split_last().expect("split yields a part");
    let mut path = path.iter();
    let mut here = table;
    while let Some(&part) = path.next() {
        let new_table = || toml::Value::Table(toml::Table::new());
        if TABLE_ARRAYS.contains(&part) {
            let elements = here
                .entry(part)
                .or_insert_with(|| toml::Value::Array(Vec::new()));
            here = element(elements, path.next().copied())
                .ok_or_else(|| ConfigError::ArrayKey(key.to_string()))?;
        } else {
            here = here
                .entry(part)
                .or_insert_with(new_table)
                .as_table_mut()
                .ok_or_else(|| ConfigError::NotATable(key.to_string()))?;
        }
    }
    here.insert(last.to_string(), value);
    Ok(())
}

/// The table at `index` of `elements`, added if `index` is its length;
/// `None` unless `index` is such a number.
fn element<'a>(elements: &'a mut toml::Value, index: Option<&str>) -> Option<&'a mut toml::Table> {
    let elements = elements.as_array_mut()?;
    let index: usize = index?.parse().ok()?;
    if index > elements.len() {
        return None;
    }
    if index == elements.len() {
        elements.push(toml::Value::Table(toml::Table::new()));
    }
    elements[index].as_table_mut()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(text: &str, pairs: &[(&str, &str)]) -> Result<toml::Table, ConfigError> {
        let mut table: toml::Table = text.parse().unwrap();
        apply(&mut table, pairs).map(|()| table)
    }

    #[test]
    fn overrides_are_typed_as_toml_reads_them() {
        let t = applied(
            "engine = \"flow\"\n[[jobs]]\nworkers = 4\n",
            &[
                ("engine", "packet"),
                ("seed", "3"),
                ("background.load", "0.5"),
                ("pfc.enabled", "true"),
                ("jobs.0.model", "vgg16"),
                ("jobs.1.workers", "8"),
            ],
        )
        .unwrap();
        let want: toml::Table = "engine = \"packet\"\nseed = 3\nbackground = { load = 0.5 }\n\
                                 pfc = { enabled = true }\n\
                                 jobs = [{ workers = 4, model = \"vgg16\" }, { workers = 8 }]\n"
            .parse()
            .unwrap();
        assert_eq!(t, want);
    }

    #[test]
    fn an_element_is_named_by_its_index_in_order() {
        for key in ["jobs.x", "jobs.0", "jobs.2.workers", "jobs.-1.workers"] {
            let err = applied("", &[(key, "4")]).unwrap_err();
            assert!(
                matches!(&err, ConfigError::ArrayKey(k) if k == key),
                "{err}"
            );
            assert_eq!(
                err.to_string(),
                format!("{key}: expected jobs.N.FIELD, N from 0 in order")
            );
        }
        let err = applied("seed = 3", &[("seed.x", "4")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "seed.x: a key under a value that is not a table"
        );
    }
}
