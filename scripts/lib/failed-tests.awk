# Usage: awk -f scripts/lib/failed-tests.awk LOG
#
# Lists each failed test in a scripts/test log with the binary it ran in and the first lines
# of its panic, and each test binary that ended with no result (a crash, a stack overflow)
# with its last lines, so the end of the output (all CI shows) names what failed and why.
function unfinished() {
    if (binary != "" && !finished) {
        printf "FAILED %s: ended without a result; its last lines:\n", binary
        for (i = 1; i <= 3; i++) if (tail[i] != "") print "    " substr(tail[i], 1, 300)
    }
}
/^ *Running / {
    unfinished()
    binary = $2
    finished = 0
    tail[1] = tail[2] = tail[3] = ""
}
/^test result:/ { finished = 1 }
/./ { tail[1] = tail[2]; tail[2] = tail[3]; tail[3] = $0 }
/^---- .* stdout ----$/ {
    name = $2
    lines = 0
    printf "FAILED %s: %s\n", binary, name
    next
}
name != "" && /panicked at/ { lines = 4 }
lines > 0 {
    if ($0 ~ /^note: run with/ || $0 ~ /^$/ && lines < 4) { lines = 0; name = ""; next }
    print "    " substr($0, 1, 300)
    lines--
    if (lines == 0) name = ""
}
/^test result: FAILED/ { name = ""; lines = 0 }
# Doc-tests are cargo's own runs, not a binary of ours.
/^ *Doc-tests / { unfinished(); binary = "" }
END { unfinished() }
