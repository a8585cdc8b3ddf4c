use super::*;

fn value(src: &str) -> Kind {
    parse(src).unwrap().kind
}

fn error(src: &str) -> (usize, usize, String) {
    let e = parse(src).unwrap_err();
    (e.line, e.column, e.message)
}

fn strings(kind: &Kind) -> Vec<String> {
    let Kind::Array(items) = kind else {
        panic!("not an array: {kind:?}")
    };
    items
        .iter()
        .map(|(_, v)| match &v.kind {
            Kind::Str(s) | Kind::Class(s) => s.clone(),
            other => format!("{other:?}"),
        })
        .collect()
}

#[test]
fn scalars_arrays_and_comments() {
    let src = "<?php\n// c\n# c\n/* c */ return array('a' => [1, -2, 1_000, 1.5, true, FALSE, null,], 'b' => array(),);\n";
    let Kind::Array(items) = value(src) else {
        panic!()
    };
    assert_eq!(items.len(), 2);
    assert_eq!(items[0].0.as_ref().unwrap().kind, Kind::Str("a".into()));
    let Kind::Array(inner) = &items[0].1.kind else {
        panic!()
    };
    let kinds: Vec<&Kind> = inner.iter().map(|(_, v)| &v.kind).collect();
    assert_eq!(
        kinds,
        vec![
            &Kind::Int(1),
            &Kind::Int(-2),
            &Kind::Int(1000),
            &Kind::Float("1.5".into()),
            &Kind::Bool(true),
            &Kind::Bool(false),
            &Kind::Null
        ]
    );
    assert_eq!(items[1].1.kind, Kind::Array(vec![]));
}

#[test]
fn string_escapes_and_concatenation() {
    let src = r#"<?php return ['it\'s \\ \n', "tab\there \"q\" \$x \x41\101\u{e9} \q", 'a' . "b" . 1, '{$not} $literal'];"#;
    assert_eq!(
        strings(&value(src)),
        vec![
            "it's \\ \\n".to_owned(),
            "tab\there \"q\" $x AAé \\q".to_owned(),
            "ab1".to_owned(),
            "{$not} $literal".to_owned(),
        ]
    );
}

#[test]
fn class_names_resolve_through_namespace_and_use() {
    let src = r#"<?php
declare(strict_types=1);
namespace App\Config;
use App\Support\LongPollSignalStore;
use App\Support\{WorkflowTaskPoller, ServerReadiness as Readiness};
use Other\Metrics as M;
use function strlen;
return [
    LongPollSignalStore::class, WorkflowTaskPoller::class, Readiness::class,
    M\Runs::class, \Fully\Qualified::class, Local::class, namespace\Here::class,
    longpollsignalstore::class,
];"#;
    assert_eq!(
        strings(&value(src)),
        vec![
            "App\\Support\\LongPollSignalStore",
            "App\\Support\\WorkflowTaskPoller",
            "App\\Support\\ServerReadiness",
            "Other\\Metrics\\Runs",
            "Fully\\Qualified",
            "App\\Config\\Local",
            "App\\Config\\Here",
            "App\\Support\\LongPollSignalStore",
        ]
    );
}

#[test]
fn unevaluable_expressions_name_line_and_column() {
    let (line, column, message) = error("<?php\nreturn [\n  'ttl' => env('TTL', 60),\n];");
    assert_eq!((line, column), (3, 12));
    assert!(message.contains("function call `env(...)`"), "{message}");
    assert!(error("<?php return [$x];").2.contains("variables"));
    assert!(error("<?php return [PHP_INT_MAX];")
        .2
        .contains("constant `PHP_INT_MAX`"));
    assert!(error("<?php return [Foo::BAR];")
        .2
        .contains("class constant"));
    assert!(error("<?php return [\"a{$b}\"];")
        .2
        .contains("interpolation"));
    assert!(error("<?php return [\"a $b\"];")
        .2
        .contains("interpolation"));
    assert!(error("<?php return [<<<EOT\nx\nEOT];")
        .2
        .contains("heredoc"));
    assert!(error("<?php return [0x1F];")
        .2
        .contains("unsupported number"));
    assert!(error("<?php return [self::class];").2.contains("no class"));
}

#[test]
fn malformed_files_are_errors_not_panics() {
    assert!(error("return [];").2.contains("<?php"));
    assert!(error("<?php $x = 1;").2.contains("unexpected `$`"));
    assert!(error("<?php echo 1;")
        .2
        .contains("unsupported statement `echo`"));
    assert!(error("<?php").2.contains("no `return"));
    assert_eq!(
        error("<?php return ['a' 'b'];").2,
        "expected `,` or `]`, found `'`"
    );
    assert!(error("<?php return ['a").2.contains("unterminated string"));
    assert!(error("<?php /* x").2.contains("unterminated `/*`"));
    assert!(error("<?php return [99999999999999999999];")
        .2
        .contains("out of range"));
    let deep = format!("<?php return {}{};", "[".repeat(100), "]".repeat(100));
    assert!(error(&deep).2.contains("nest deeper"));
    for cut in 0.."<?php return ['a' => [\"b\\n\", Foo::class, 1.5], 'c' => null];".len() {
        let src = &"<?php return ['a' => [\"b\\n\", Foo::class, 1.5], 'c' => null];"[..cut];
        let _ = parse(src);
    }
}
