set terminal svg size 1400,650 dynamic background rgb 'white'
set output 'pareto_bert-large_32.svg'
set title 'bert-large, batch 32: peak memory against step time (NVIDIA H200)' noenhanced
set xlabel 'step time (ms)'
set ylabel 'peak allocated (MiB)'
set grid
set key outside right top vertical maxrows 60 font ',10' noenhanced
set offsets graph 0.05, graph 0.05, graph 0.1, graph 0.1
plot 'pareto_bert-large_32.dat' index 0 using 3:2 with points pt 5 ps 1.6 lc rgb '#1f77b4' title 'PyTorch eager (12203 MiB, 194.5 ms)', 'pareto_bert-large_32.dat' index 1 using 3:2 with points pt 5 ps 1.6 lc rgb '#ff7f0e' title 'PyTorch ckpt (4523 MiB, 253.5 ms)', 'pareto_bert-large_32.dat' index 2 using 3:2 with points pt 7 ps 1.6 lc rgb '#2ca02c' title 'mutwo baseline (11695 MiB, 199.4 ms)', 'pareto_bert-large_32.dat' index 3 using 3:2 with points pt 7 ps 1.6 lc rgb '#d62728' title 'mutwo baseline-cuda-graph (11695 MiB, 195.5 ms)', 'pareto_bert-large_32.dat' index 4 using 3:2 with points pt 7 ps 1.6 lc rgb '#9467bd' title 'mutwo per-layer (CUDA graph) (4399 MiB, 253.2 ms)', 'pareto_bert-large_32.dat' index 5 using 3:2 with points pt 7 ps 1.6 lc rgb '#8c564b' title 'mutwo mutwo (CUDA graph) (4399 MiB, 235.9 ms)', 'pareto_bert-large_32.dat' index 6 using 3:2 with points pt 7 ps 1.6 lc rgb '#e377c2' title 'mutwo mutwo-at-ckpt-peak (CUDA graph) (4511 MiB, 234.6 ms)'
set terminal pngcairo size 1400,650 background rgb 'white'
set output 'pareto_bert-large_32.png'
set title 'bert-large, batch 32: peak memory against step time (NVIDIA H200)' noenhanced
set xlabel 'step time (ms)'
set ylabel 'peak allocated (MiB)'
set grid
set key outside right top vertical maxrows 60 font ',10' noenhanced
set offsets graph 0.05, graph 0.05, graph 0.1, graph 0.1
plot 'pareto_bert-large_32.dat' index 0 using 3:2 with points pt 5 ps 1.6 lc rgb '#1f77b4' title 'PyTorch eager (12203 MiB, 194.5 ms)', 'pareto_bert-large_32.dat' index 1 using 3:2 with points pt 5 ps 1.6 lc rgb '#ff7f0e' title 'PyTorch ckpt (4523 MiB, 253.5 ms)', 'pareto_bert-large_32.dat' index 2 using 3:2 with points pt 7 ps 1.6 lc rgb '#2ca02c' title 'mutwo baseline (11695 MiB, 199.4 ms)', 'pareto_bert-large_32.dat' index 3 using 3:2 with points pt 7 ps 1.6 lc rgb '#d62728' title 'mutwo baseline-cuda-graph (11695 MiB, 195.5 ms)', 'pareto_bert-large_32.dat' index 4 using 3:2 with points pt 7 ps 1.6 lc rgb '#9467bd' title 'mutwo per-layer (CUDA graph) (4399 MiB, 253.2 ms)', 'pareto_bert-large_32.dat' index 5 using 3:2 with points pt 7 ps 1.6 lc rgb '#8c564b' title 'mutwo mutwo (CUDA graph) (4399 MiB, 235.9 ms)', 'pareto_bert-large_32.dat' index 6 using 3:2 with points pt 7 ps 1.6 lc rgb '#e377c2' title 'mutwo mutwo-at-ckpt-peak (CUDA graph) (4511 MiB, 234.6 ms)'
