#!/usr/bin/env bash
# The nightly's durable history: asv results and sidecars live on a branch of the repository
# (`bench-results` by default, a folder `asv/` in it), not only in the Actions cache (evicted after
# 7 days unused). The database is rebuilt from them whenever the cache has lost it.
#
#   scripts/results_branch.sh pull RESULTS_DIR [REMOTE] [BRANCH]   # branch's asv/ -> RESULTS_DIR (added, never deleted)
#   scripts/results_branch.sh push RESULTS_DIR MESSAGE [REMOTE] [BRANCH]  # RESULTS_DIR -> branch's asv/, one commit, pushed
#
# Both work in a worktree under .git (never touching the checkout). `pull` with no branch on the
# remote says so and leaves RESULTS_DIR as it is; `push` creates the branch (an orphan) the first
# time. Files are only added or updated: a result file never leaves the history.
set -euo pipefail
cmd=${1:?usage: results_branch.sh pull|push RESULTS_DIR ...}
dir=${2:?usage: results_branch.sh pull|push RESULTS_DIR ...}
if [ "$cmd" = push ]; then
  msg=${3:?usage: results_branch.sh push RESULTS_DIR MESSAGE [REMOTE] [BRANCH]}
  remote=${4:-origin}; branch=${5:-bench-results}
else
  remote=${3:-origin}; branch=${4:-bench-results}
fi
gitdir=$(git rev-parse --absolute-git-dir)
wt="$gitdir/xrt-results-worktree"
git worktree remove --force "$wt" >/dev/null 2>&1 || rm -rf "$wt"
git worktree prune
have_remote_branch() { git ls-remote --exit-code --heads "$remote" "$branch" >/dev/null 2>&1; }

case $cmd in
  pull)
    if ! have_remote_branch; then
      echo "results_branch: $remote has no branch $branch yet: nothing to restore"
      exit 0
    fi
    git fetch -q "$remote" "$branch"
    git worktree add -q --detach "$wt" FETCH_HEAD
    mkdir -p "$dir"
    n=$(find "$wt/asv" -type f 2>/dev/null | wc -l)
    [ -d "$wt/asv" ] && cp -a "$wt/asv/." "$dir/"
    git worktree remove --force "$wt"
    echo "results_branch: restored $n file(s) from $remote/$branch into $dir"
    ;;
  push)
    [ -d "$dir" ] || { echo "results_branch: $dir: no such folder" >&2; exit 2; }
    if have_remote_branch; then
      git fetch -q "$remote" "$branch"
      git worktree add -q -B "$branch" "$wt" FETCH_HEAD
    else
      git worktree add -q --detach "$wt"
      git -C "$wt" checkout -q --orphan "$branch"
      git -C "$wt" rm -rq --cached . >/dev/null 2>&1 || true
      find "$wt" -mindepth 1 -maxdepth 1 ! -name .git -exec rm -rf {} +
    fi
    mkdir -p "$wt/asv"
    cp -a "$dir/." "$wt/asv/"
    git -C "$wt" add -A asv
    if git -C "$wt" diff --cached --quiet; then
      echo "results_branch: nothing new to keep on $branch"
    else
      git -C "$wt" -c user.name="${GIT_AUTHOR_NAME:-xrt nightly}" -c user.email="${GIT_AUTHOR_EMAIL:-xrt-nightly@localhost}" \
        commit -q -m "$msg"
      git -C "$wt" push -q "$remote" "HEAD:refs/heads/$branch"
      echo "results_branch: kept $(git -C "$wt" show --stat --format= HEAD | tail -1 | sed 's/^ *//') on $remote/$branch"
    fi
    git worktree remove --force "$wt"
    ;;
  *) echo "results_branch: unknown command $cmd (pull or push)" >&2; exit 2 ;;
esac
