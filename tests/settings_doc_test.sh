#!/bin/sh
# docs/settings.md, tmx-info and the library's sources name the same
# settings and launcher variables: none missing from one of them. With a
# setting that does not parse, tmx-info says so once and exits 1.
#   usage: settings_doc_test.sh TMX_INFO SOURCE_DIR
set -u
info="$1"
src="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$info" | sed -n 's/^  \(TMX_[A-Z0-9_]*\).*/\1/p' | sort -u >"$tmp/info"
sed -n 's/^| `\(TMX_[A-Z0-9_]*\)` |.*/\1/p' "$src/docs/settings.md" | sort -u >"$tmp/doc"
# Every TMX_ name in a string of the library's code (not its tests).
find "$src/src" -name '*.c' ! -name '*_test.c' -exec grep -ho '"TMX_[A-Z0-9_]*' {} + |
    tr -d '"' | sort -u >"$tmp/code"
rc=0
[ -s "$tmp/info" ] || { echo "settings_doc_test: tmx-info listed nothing"; exit 1; }
if ! cmp -s "$tmp/info" "$tmp/doc"; then
    echo "settings_doc_test: tmx-info and docs/settings.md differ (< tmx-info, > docs):"
    diff "$tmp/info" "$tmp/doc"
    rc=1
fi
if [ -n "$(comm -23 "$tmp/code" "$tmp/info")" ]; then
    echo "settings_doc_test: the code reads names tmx-info does not list:"
    comm -23 "$tmp/code" "$tmp/info"
    rc=1
fi
TMX_LOG_LEVEL=bogus "$info" >"$tmp/bad" 2>&1
bad_rc=$?
if [ "$bad_rc" -ne 1 ] || [ "$(grep -c "TMX_LOG_LEVEL='bogus'" "$tmp/bad")" -ne 1 ]; then
    echo "settings_doc_test: TMX_LOG_LEVEL=bogus tmx-info: exit status $bad_rc, expected 1 and one error:"
    cat "$tmp/bad"
    rc=1
fi
[ "$rc" -eq 0 ] && echo "settings_doc_test: $(wc -l <"$tmp/info") names, the same in tmx-info, docs and code"
exit "$rc"
