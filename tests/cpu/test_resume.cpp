// Resumable sampling on the tiny preset: a 12-step run stopped after step k (cancelled through
// the library, Ctrl-C or SIGKILL through the CLI) and resumed ends with the same bits as an
// uninterrupted run; resume files from another run are refused with the difference named.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "h3rt/pipeline.h"
#include "h3rt/safetensors.h"
#include "test_util.h"

namespace h3rt {
namespace {

namespace fs = std::filesystem;

std::string tmp(const std::string& name) {
  static const test::TempDir dir("h3rt_resume_tests");
  return dir.file(name);
}

// The tiny preset at a small shape (2 latent frames, 64 x 64 pixels): a step takes ~0.1 s.
RequestOptions small_request() {
  RequestOptions ro;
  ro.frames = 5;
  ro.width = ro.height = 64;
  return ro;
}

struct TinyRun {
  std::unique_ptr<Denoiser> d = Denoiser::create(ModelSource{});
  Request r = make_request(d->config(), small_request());
};

SampleOptions options(Scheduler scheduler, SamplerKind sampler, int steps = 12) {
  SampleOptions o;
  o.steps = steps;
  o.scheduler = scheduler;
  o.sampler = sampler;
  o.model_identity = "tiny test";
  return o;
}

void expect_same_result(const SampleResult& a, const SampleResult& b, const std::string& what) {
  test::expect_same_bits(a.video_latents, b.video_latents, what + " video");
  test::expect_same_bits(a.audio_latents, b.audio_latents, what + " audio");
}

// Runs o stopped by the progress callback after `stop_after` steps, then resumed.
SampleResult stop_and_resume(TinyRun& run, SampleOptions o, int stop_after,
                             const std::string& file) {
  o.checkpoint_path = file;
  o.progress = [stop_after](int step, int, double) { return step < stop_after; };
  try {
    sample(*run.d, run.r, o);
    ADD_FAILURE() << "the run was not cancelled";
  } catch (const Cancelled& e) {
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
  EXPECT_EQ(SafetensorsFile::open(file).metadata().at("steps_done"), std::to_string(stop_after));
  o.progress = nullptr;
  o.resume_path = file;
  SampleResult res = sample(*run.d, run.r, o);
  EXPECT_EQ(res.resumed_steps, stop_after);
  EXPECT_EQ(static_cast<int>(res.stages.size()), o.steps - stop_after);
  return res;
}

// 6-step runs stopped after step 3 (and 1): every sampler's state crosses the resume file; the
// 12-step runs are the periodic test's and the CLI's below.
TEST(Resume, CancelledRunsResumeBitIdentical) {
  TinyRun run;
  for (auto [sched, sampler] : {std::pair{Scheduler::simple, SamplerKind::res_multistep},
                                std::pair{Scheduler::diffusers, SamplerKind::euler},
                                std::pair{Scheduler::simple, SamplerKind::euler_ancestral}}) {
    const SampleOptions o = options(sched, sampler, 6);
    const SampleResult whole = sample(*run.d, run.r, o);
    const std::string what = std::string(sampler_name(sampler)) + "_" + scheduler_name(sched);
    expect_same_result(stop_and_resume(run, o, 3, tmp(what + ".resume")), whole, what);
    if (sampler == SamplerKind::res_multistep)  // its memory (previous denoised) is saved
      expect_same_result(stop_and_resume(run, o, 1, tmp(what + "1.resume")), whole, what + " k=1");
  }
}

TEST(Resume, PeriodicCheckpointsAndCancelFlag) {
  TinyRun run;
  SampleOptions o = options(Scheduler::simple, SamplerKind::res_multistep);
  const SampleResult whole = sample(*run.d, run.r, o);
  o.checkpoint_path = tmp("periodic.resume");
  o.checkpoint_every = 4;
  std::atomic<bool> stop{false};
  o.cancel = &stop;
  o.progress = [&](int step, int, double) {
    if (step == 9) {  // the step-8 checkpoint exists; a killed run would resume from here
      EXPECT_EQ(SafetensorsFile::open(o.checkpoint_path).metadata().at("steps_done"), "8");
      fs::copy_file(o.checkpoint_path, tmp("at8.resume"));
      stop = true;  // as the CLI's SIGINT handler does: seen after the next step
    }
    return true;
  };
  EXPECT_THROW(sample(*run.d, run.r, o), Cancelled);
  EXPECT_EQ(SafetensorsFile::open(o.checkpoint_path).metadata().at("steps_done"), "10");
  o.cancel = nullptr;
  o.progress = nullptr;
  o.checkpoint_every = 0;
  for (const std::string& f : {o.checkpoint_path, tmp("at8.resume")}) {
    o.resume_path = f;
    expect_same_result(sample(*run.d, run.r, o), whole, f);
  }
  // A stop asked for during the last step: nothing is left to stop, the run completes.
  stop = false;
  o.resume_path.clear();
  o.cancel = &stop;
  o.progress = [&](int step, int, double) {
    stop = step == 11;
    return true;
  };
  expect_same_result(sample(*run.d, run.r, o), whole, "stop during the last step");
}

// The resume file of `o` after 3 steps, read back by a run with `change` applied.
std::string refusal(TinyRun& run, const std::function<void(SampleOptions&, Request&)>& change) {
  SampleOptions o = options(Scheduler::simple, SamplerKind::res_multistep);
  o.checkpoint_path = tmp("refuse.resume");
  o.progress = [](int step, int, double) { return step < 3; };
  EXPECT_THROW(sample(*run.d, run.r, o), Cancelled);
  o.progress = nullptr;
  o.resume_path = o.checkpoint_path;
  Request r = run.r;
  change(o, r);
  try {
    sample(*run.d, r, o);
  } catch (const Cancelled&) {
    throw;
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(Resume, RefusesAnotherRunNamingTheDifference) {
  TinyRun run;
  auto has = [](const std::string& msg, const std::string& word) {
    EXPECT_NE(msg.find(word), std::string::npos) << msg;
  };
  has(refusal(run, [](SampleOptions& o, Request&) { o.model_identity = "other"; }),
      "model is 'tiny test' there, 'other' here");
  has(refusal(run, [](SampleOptions& o, Request&) { o.steps = 20; }), "steps is '12' there");
  has(refusal(run, [](SampleOptions& o, Request&) { o.sampler = SamplerKind::euler; }),
      "sampler is 'res_multistep' there, 'euler' here");
  has(refusal(run, [](SampleOptions& o, Request&) { o.video_shift = 6; }), "shift_video");
  has(refusal(run, [](SampleOptions&, Request& r) { r.text[0] += 1; }), "request is");
  has(refusal(run,
              [](SampleOptions&, Request& r) {
                RequestOptions ro = small_request();
                ro.frames = 9;
                r = make_request(*config_preset("tiny"), ro);
              }),
      "layout is");
  has(refusal(run, [](SampleOptions& o, Request&) { o.step_cache.threshold = 0.08; }),
      "step_cache is 'off' there, 'threshold 0.08");
  has(refusal(run, [](SampleOptions& o, Request&) { o.hybrid.sparse.tau = 1; }),
      "sparse_attention is 'off' there, 'tau 1, dense steps 10");
  // Not a resume file at all.
  SampleOptions o = options(Scheduler::simple, SamplerKind::euler);
  o.resume_path = test::golden_dir() + "/weights.safetensors";
  EXPECT_THROW(sample(*run.d, run.r, o), Error);
}

// ---------------------------------------------------------------- through the CLI

const std::string kSample =
    "sample --steps 12 --scheduler simple --sampler res_multistep --frames 5 --width 64 "
    "--height 64";

std::string checksums(const std::string& report) {
  std::ifstream in(report);
  const nlohmann::json j = nlohmann::json::parse(in);
  return j.at("checksums").dump();
}

// Starts the CLI in the background; returns its pid (output to `log`).
pid_t spawn_cli(const std::string& args, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string cmd =
        "exec " + std::string(H3RT_CLI_PATH) + " " + args + " >" + log + " 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// Waits until the file exists (the run's first checkpoint), at most a minute.
bool wait_for(const std::string& file) {
  for (int i = 0; i < 6000 && !fs::exists(file); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return fs::exists(file);
}

int wait_status(pid_t pid) {
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void interrupted_cli_run_resumes(int signal, int expected_status) {
  const std::string tag = std::to_string(signal);
  const std::string whole = tmp("whole" + tag + ".json");
  test::CliRun r =
      test::run_cli(kSample + " --out " + tmp("whole" + tag + ".st") + " --report " + whole);
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string out = tmp("cut" + tag + ".st"), ckpt = out + ".resume";
  const pid_t pid = spawn_cli(kSample + " --checkpoint-every 1 --out " + out, tmp("log" + tag));
  ASSERT_TRUE(wait_for(ckpt)) << read_file(tmp("log" + tag));
  kill(pid, signal);
  EXPECT_EQ(wait_status(pid), expected_status) << read_file(tmp("log" + tag));
  const int done = std::stoi(SafetensorsFile::open(ckpt).metadata().at("steps_done"));
  EXPECT_GE(done, 1);
  EXPECT_LT(done, 12);
  const std::string report = tmp("resumed" + tag + ".json");
  r = test::run_cli(kSample + " --resume " + ckpt + " --out " + out + " --report " + report);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(checksums(report), checksums(whole));
  EXPECT_FALSE(fs::exists(ckpt)) << "a completed run removes its resume file";
  std::ifstream in(report);
  EXPECT_EQ(nlohmann::json::parse(in).at("sampling").at("resumed_steps").get<int>(), done);
}

TEST(ResumeCli, CtrlCSavesAndResumesBitIdentical) {
  interrupted_cli_run_resumes(SIGINT, 130);
}

TEST(ResumeCli, KilledRunResumesFromLastCheckpoint) {
  interrupted_cli_run_resumes(SIGKILL, 128 + SIGKILL);
}

TEST(ResumeCli, RefusesAnotherRequest) {
  const std::string out = tmp("other.st");
  const pid_t pid = spawn_cli(kSample + " --checkpoint-every 1 --out " + out, tmp("log_other"));
  ASSERT_TRUE(wait_for(out + ".resume"));
  kill(pid, SIGINT);
  wait_status(pid);
  const test::CliRun r =
      test::run_cli(kSample + " --seed 5 --resume " + out + ".resume --out " + out);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("belongs to another run"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("seed is '440420' there, '5' here"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace h3rt
