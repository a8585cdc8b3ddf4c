//! Where reports go: `--format` and the repeatable `--output`.
//!
//! One run can feed several consumers (`--output sarif=dwlint.sarif
//! --format github`), so the check runs once and each requested format is
//! written to its own destination. The rules, in the order applied:
//!
//! - `--output FORMAT=FILE` (FORMAT one of the format names) adds a report
//!   in FORMAT written to FILE; `-` is standard output.
//! - `--output NAME=FILE` where NAME is a plain word (letters, digits, `-`,
//!   `_`) but no format is refused: `xml=out.xml` is a typo for a format, not
//!   a file name. A file whose name holds `=` is written as `./NAME=FILE`.
//! - `--output FILE` (anything else) sends the `--format` report to FILE
//!   instead of standard output. At most one may be given.
//! - The `--format` report (default `human`) is written unless only
//!   `FORMAT=FILE` outputs were given and `--format` was not: then those are
//!   exactly the reports asked for.
//! - Two reports on standard output, or two into one file, are an error.

use std::path::PathBuf;

use crate::base::error::RunError;
use crate::report::model::Inputs;
use crate::report::Format;

/// Where one report is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// Standard output.
    Stdout,
    /// A file, created or truncated.
    File(PathBuf),
}

/// One report to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sink {
    /// Its format.
    pub format: Format,
    /// Its destination.
    pub destination: Destination,
}

fn destination(text: &str) -> Destination {
    if text == "-" {
        Destination::Stdout
    } else {
        Destination::File(PathBuf::from(text))
    }
}

/// The reports a command line asks for.
pub fn plan(format: Option<Format>, outputs: &[String]) -> Result<Vec<Sink>, RunError> {
    let mut bare = Vec::new();
    let mut sinks = Vec::new();
    for output in outputs {
        if let Some((name, _)) = output.split_once('=') {
            let word = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if word && Format::from_name(name).is_none() {
                return Err(RunError::Usage(format!(
                    "unknown report format `{name}` in `--output {output}`; formats: {} (a file name holding `=` is written as `./{output}`)",
                    Format::ALL.map(Format::name).join(", ")
                )));
            }
        }
        let tagged = output
            .split_once('=')
            .and_then(|(name, file)| Some((Format::from_name(name)?, file)));
        match tagged {
            Some((_, "")) => {
                return Err(RunError::Usage(format!(
                    "`--output {output}` names no file (use `-` for standard output)"
                )))
            }
            Some((format, file)) => sinks.push(Sink {
                format,
                destination: destination(file),
            }),
            None => bare.push(output.as_str()),
        }
    }
    if bare.len() > 1 {
        return Err(RunError::Usage(format!(
            "`--output FILE` was given {} times; give the others a format, as in `--output sarif=FILE`",
            bare.len()
        )));
    }
    if format.is_some() || !bare.is_empty() || sinks.is_empty() {
        sinks.insert(
            0,
            Sink {
                format: format.unwrap_or(Format::Human),
                destination: bare.first().map_or(Destination::Stdout, |f| destination(f)),
            },
        );
    }
    for (i, sink) in sinks.iter().enumerate() {
        if sinks[..i].iter().any(|s| s.destination == sink.destination) {
            let place = match &sink.destination {
                Destination::Stdout => "standard output".to_owned(),
                Destination::File(path) => path.display().to_string(),
            };
            return Err(RunError::Usage(format!(
                "two reports would be written to {place}; send one of them elsewhere with `--output FORMAT=FILE`"
            )));
        }
    }
    Ok(sinks)
}

/// Refuses a plan that would write a report over a file the run read.
pub fn refuse_overwriting(sinks: &[Sink], inputs: &Inputs) -> Result<(), RunError> {
    for sink in sinks {
        if let Destination::File(path) = &sink.destination {
            if inputs.contains(path) {
                return Err(RunError::Usage(format!(
                    "`--output {}` would overwrite a file this run checks; write the report elsewhere",
                    crate::report::printable(&path.to_string_lossy())
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink(format: Format, to: &str) -> Sink {
        Sink {
            format,
            destination: destination(to),
        }
    }

    fn outputs(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_default_is_human_on_stdout() {
        assert_eq!(plan(None, &[]).unwrap(), [sink(Format::Human, "-")]);
    }

    #[test]
    fn tagged_outputs_alone_are_exactly_what_is_written() {
        let planned = plan(None, &outputs(&["sarif=dwlint.sarif", "github=-"])).unwrap();
        assert_eq!(
            planned,
            [
                sink(Format::Sarif, "dwlint.sarif"),
                sink(Format::Github, "-")
            ]
        );
    }

    #[test]
    fn an_explicit_format_is_kept_beside_tagged_outputs() {
        let planned = plan(Some(Format::Github), &outputs(&["sarif=x.sarif"])).unwrap();
        assert_eq!(
            planned,
            [sink(Format::Github, "-"), sink(Format::Sarif, "x.sarif")]
        );
    }

    #[test]
    fn a_bare_output_redirects_the_format_report() {
        let planned = plan(Some(Format::Json), &outputs(&["./report=1.json"])).unwrap();
        assert_eq!(planned, [sink(Format::Json, "./report=1.json")]);
    }

    #[test]
    fn an_unknown_format_name_is_refused_not_taken_for_a_file() {
        let err = plan(None, &outputs(&["xml=out.xml"])).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("unknown report format `xml`"), "{message}");
        assert!(message.contains("./xml=out.xml"), "{message}");
    }

    #[test]
    fn clashes_are_refused() {
        for bad in [
            &["json=-", "github=-"][..],
            &["a.txt", "b.txt"],
            &["sarif=x", "junit=x"],
            &["sarif="],
        ] {
            assert!(plan(None, &outputs(bad)).is_err(), "{bad:?}");
        }
        assert!(plan(Some(Format::Human), &outputs(&["short=-"])).is_err());
    }
}
