#!/usr/bin/env bash
# lint.layers: the library (ddp/) knows nothing of the course (course/): none of its files includes
# course/, names the course's namespace (ddpw::), its command line (CLI11, Options, parse_options),
# an exercise (TODO(stepN)) or the course's set-up (scripts/setup.sh, clusters/<site>: a library
# user has neither; the course adds such hints where it catches the error). ARCHITECTURE.md says
# where a new thing goes. And the build's switches (DDPW_HAVE_CUDA, DDPW_HAVE_NCCL, ...) come from
# the generated ddp/config.h, not from the compiler's command line: a file that tests one without
# including it would silently compile its GPU code out.
# Nor does a string literal in ddp/ name one of the course's flags (those course/options.cpp
# defines): a library user has none; a hint names the library's setting (ddp/setting_names.h), which
# the course registers under its flag. A launcher's or scheduler's flag of the same name
# (torchrun's --master-port, sbatch's --nodes) may appear in a literal that names that tool.
# Nor does a comment in ddp/ speak of the course: its programs (hello, step2_env_launch, "step 4"),
# its learners, exercises, solutions and lessons, "the tutorial", its datasets (MNIST) or its flags
# (a launcher's flag of the same name may appear in a comment that names that launcher).
# The checks first prove that they catch a planted violation of each kind.
set -euo pipefail
root=${DDPW_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}

# The course's flags, from its parser: app.add_option("--batch-size,--batch_size", ...).
course_flags=$(grep -oP 'add_(option|flag)\(\s*"\K[^"]+' "$root/course/options.cpp" | tr ',' '\n' | grep '^--' | sort -u)
if [ "$(wc -l <<< "$course_flags")" -lt 10 ]; then
  echo "FAIL: found only these flags in course/options.cpp: $course_flags (has its add_option form changed?)"
  exit 1
fi

# flag_literals FILE...: "file:line: ..." for each string literal naming a course flag. Comments
# and character literals are skipped; a literal that names a launcher may name that launcher's
# flags that share a name with a course flag.
flag_literals() {
  [ $# -gt 0 ] || return 0
  FLAGS="$course_flags" perl -ne '
    BEGIN {
      @flags = split /\n/, $ENV{FLAGS};
      $any = join "|", map { quotemeta } sort { length($b) <=> length($a) } @flags;
      $any = qr/(?<![\w-])(?:$any)(?![\w-])/;
      %shared = map { $_ => 1 } qw(--master-port --master-addr --nodes --gpus);
    }
    while (/("(?:[^"\\]|\\.)*")|\x27(?:[^\x27\\]|\\.)*\x27|\/\*.*?\*\/|(\/\/.*)/g) {
      last if defined $2;
      next unless defined $1;
      my $literal = $1;
      next unless $literal =~ $any;  # one pass; then which flags
      for my $flag (@flags) {
        next unless $literal =~ /(?<![\w-])\Q$flag\E(?![\w-])/;
        next if $shared{$flag} && $literal =~ /torchrun|srun|sbatch|SBATCH|salloc|mpirun|SLURM_/;
        print "$ARGV:$.: names the course flag $flag: $literal\n";
      }
    }
    close ARGV if eof;' "$@"
}

# course_comments FILE...: "file:line: ..." for each comment that names the course's words or flags.
course_comments() {
  [ $# -gt 0 ] || return 0
  FLAGS="$course_flags" perl -ne '
    BEGIN {
      @flags = split /\n/, $ENV{FLAGS};
      $any = join "|", map { quotemeta } sort { length($b) <=> length($a) } @flags;
      $any = qr/(?<![\w-])(?:$any)(?![\w-])/;
      %shared = map { $_ => 1 } qw(--master-port --master-addr --nodes --gpus);
    }
    if ($ARGV ne $file) { $file = $ARGV; $line = 0 }  # per file ("next" below skips "close ARGV if eof")
    ++$line;
    my $comment = "";
    while (/"(?:[^"\\]|\\.)*"|\x27(?:[^\x27\\]|\\.)*\x27|\/\*(.*?)\*\/|\/\/(.*)/g) {
      $comment .= " $1" if defined $1;
      if (defined $2) { $comment .= " $2"; last }
    }
    next if $comment eq "";
    if ($comment =~ /\b(tutorial|(?:fashion-)?mnist|hello|learners?|exercises?|solutions?|lessons?|course|step ?\d+[a-z]?|step\d+[a-z]?_\w*)\b/i) {
      print "$ARGV:$line: a comment names the course ($1):$comment\n";
    }
    next unless $comment =~ $any;  # one pass; then which flags
    for my $flag (@flags) {
      next unless $comment =~ /(?<![\w-])\Q$flag\E(?![\w-])/;
      next if $shared{$flag} && $comment =~ /torchrun|srun|sbatch|SBATCH|salloc|mpirun|SLURM_/;
      print "$ARGV:$line: a comment names the course flag $flag:$comment\n";
    }' "$@"
}

# violations DIR: one line per offending line of DIR's files, "file:line: what"; none: no output.
violations() {
  local dir=$1
  # "Options" alone: the course's command-line struct (ProcessGroupGloo::Options and DdpOptions are
  # other names).
  grep -rnPH --include='*.h' --include='*.cpp' --include='*.in' \
    '#\s*include\s*[<"]course/|\bddpw::|\bCLI(/|::)|(?<![\w:])Options\b|\bparse_options\b|TODO\(step|scripts/setup\.sh|\bclusters/' \
    "$dir" || true
  # The build: no target of the course, no CLI11. (ddpw:: is the package's namespace there.)
  grep -rnPH --include='CMakeLists.txt' '^[^#]*(\bddpw_(cli|course)\b|\bCLI11\b|course/)' "$dir" || true
  local sources=()
  mapfile -t sources < <(find "$dir" \( -name '*.h' -o -name '*.cpp' -o -name '*.in' \) -type f | sort)
  flag_literals "${sources[@]}"
  course_comments "${sources[@]}"
}

# unconfigured DIR...: files that use a switch of ddp/config.h without including it.
unconfigured() {
  grep -rlE --include='*.h' --include='*.cpp' '\bDDPW_(HAVE_[A-Z]+|TORCH_VERSION|VERSION)\b' "$@" |
    xargs -r grep -L '#include "ddp/config.h"' || true
}

probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
planted=('planted.h:#include "course/options.h"' 'planted.h:ddpw::Options o;' 'planted.h:#include <CLI/CLI.hpp>'
         'planted.h:void f(const Options&);' 'planted.h:auto o = parse_options(argc, argv, 0);'
         'planted.h:// complete TODO(step4) first' 'planted.cpp:  hint = "run scripts/setup.sh";'
         'planted.cpp:  hint = "see clusters/<site>/README.md";' 'CMakeLists.txt:target_link_libraries(ddp PRIVATE ddpw_cli)'
         'planted.cpp:  hint = "use --backend gloo for CPU training";'
         'planted.cpp:  throw Error("x", "or pass --master-port N; " + why);'
         'planted.cpp:  f(/*on=*/true, "start again with --fresh");  // the course'\''s flag'
         'planted.h:// 2048 samples (the tutorial'\''s size)' 'planted.h:// the optimizer of the MNIST seed'
         'planted.h:/* hello prints it */ int x;' 'planted.h:// as step2_env_launch does' 'planted.cpp:  int s = 0;  // step 4 shards it'
         'planted.h:// the learner sees it' 'planted.h:// the solution resumes' 'planted.cpp:// waits twice --rendezvous-timeout')
for plant in "${planted[@]}"; do
  rm -f "$probe"/*
  printf '%s\n' "${plant#*:}" > "$probe/${plant%%:*}"
  if [ -z "$(violations "$probe")" ]; then
    echo "FAIL: the check misses a planted violation: $plant"
    exit 1
  fi
done
# ...and lets a launcher's flags, the library's names and comments pass.
allowed=('hint = "(torchrun: --master-port N) or pass " + setting_value(Setting::kMasterPort, "N");'
         'hint = "request tasks explicitly: #SBATCH --ntasks-per-node=N (and --nodes=M)";'
         'hint = "request GPUs from the scheduler (--gres=gpu:N / --gpus-per-node=N)";'
         'hint = "use " + setting_value(Setting::kBackend, "gloo");  // e.g. --my-backend gloo'
         'char q = '\''"'\''; std::string s = "--devices-per-rank";  /* "--my-device cpu" */'
         'int step = 0;  // the optimizer'\''s steps, 2048 samples; torchrun --master-port N'
         'std::string s = "// not a comment: hello, the tutorial";')
for line in "${allowed[@]}"; do
  rm -f "$probe"/*
  printf '%s\n' "$line" > "$probe/allowed.cpp"
  if [ -n "$(violations "$probe")" ]; then
    echo "FAIL: the check refuses an allowed line: $line"
    violations "$probe"
    exit 1
  fi
done

printf '#ifdef DDPW_HAVE_CUDA\n#endif\n' > "$probe/planted.h"
if [ -z "$(unconfigured "$probe")" ]; then
  echo "FAIL: the check misses a file that tests DDPW_HAVE_CUDA without ddp/config.h"
  exit 1
fi

found=$(violations "$root/ddp")
if [ -n "$found" ]; then
  echo "$found"
  echo "FAIL: the library (ddp/) refers to the course above. Fix: move that code to course/ (namespace ddpw), or" \
       "give the library a plain setting the course fills in (ARCHITECTURE.md, \"Two layers\"); a hint names a" \
       "setting with setting_name/setting_value (ddp/setting_names.h), which the course registers under its flag; a comment"\
       "says it in the library's own words (a parameter, PyTorch's name for the thing)."
  exit 1
fi
dirs=()
for d in ddp course tests diagnostics bench examples; do [ -d "$root/$d" ] && dirs+=("$root/$d"); done
found=$(unconfigured "${dirs[@]}")
if [ -n "$found" ]; then
  echo "$found"
  echo "FAIL: these files test a DDPW_* switch without #include \"ddp/config.h\" (the switches are not compile" \
       "definitions: without it the test is always false). Fix: include ddp/config.h"
  exit 1
fi
echo "ok: nothing in ddp/ includes course/ or names the course's command line (flags included), namespace or" \
     "exercises; no comment there speaks of the course;" \
     "every file that tests a DDPW_* switch includes ddp/config.h"
